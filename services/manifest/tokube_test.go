package manifest

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	sigsjson "sigs.k8s.io/json"

	pf "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt/vttest"
)

// TestMessageToKubeMatchesProtojson holds the direct conversion to the
// one it replaced: protojson, a JSON decoder and toKube, with the numbers
// made int64 or float64. Random messages of every kind, every field filled
// with some chance (maps, lists, oneofs, enums, 64-bit and special float
// values, Timestamps with every precision, Struct, IntOrString), give the
// same tree both ways.
func TestMessageToKubeMatchesProtojson(t *testing.T) {
	forRandomMessages(t, 7, func(k *kind, m proto.Message) string {
		want, err := protojsonToKube(m, k.shape)
		if err != nil {
			return "protojson: " + err.Error()
		}
		got, err := messageToKube(m.ProtoReflect(), k.shape)
		if err != nil {
			return err.Error()
		}
		if diff := cmp.Diff(nativeNumbers(want), got); diff != "" {
			return "direct conversion differs from protojson's (-protojson +direct):\n" + diff
		}
		return ""
	})
}

// TestKubeObjectMatchesJSON holds toKubeObject to the JSON round trip it
// replaced (protojson into a tree, encoding/json, then sigs.k8s.io/json
// into the Kubernetes type): random messages of every kind give deeply
// equal objects, or fail both ways.
func TestKubeObjectMatchesJSON(t *testing.T) {
	forRandomMessages(t, 9, func(k *kind, m proto.Message) string {
		tree, err := protojsonToKube(m, k.shape)
		if err != nil {
			return err.Error()
		}
		tree["apiVersion"], tree["kind"] = k.apiVersion, k.kind
		j, err := json.Marshal(tree)
		if err != nil {
			return err.Error()
		}
		want := k.newKube()
		wantErr := sigsjson.UnmarshalCaseSensitivePreserveInts(j, want)
		got, err := toKubeObject(k, m)
		if (err == nil) != (wantErr == nil) {
			return fmt.Sprintf("error %v, the JSON round trip's %v", err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(want, got) {
			return "differs from the JSON round trip:\n" + cmp.Diff(want, got)
		}
		return ""
	})
}

// forRandomMessages calls check with 60 random messages of every kind
// (fillMessage, from seed) and fails on the first it finds wrong.
func forRandomMessages(t *testing.T, seed uint64, check func(*kind, proto.Message) string) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed+34))
	for _, k := range kinds {
		for i := range 60 {
			m := k.newProto()
			fillMessage(r, m.ProtoReflect())
			if why := check(k, m); why != "" {
				t.Fatalf("%s #%d: %s", k.kind, i, why)
			}
		}
	}
}

// TestMessageToKubeRefusesWhatProtojsonRefuses: a string that is not
// UTF-8 and a Timestamp out of range fail both ways.
func TestMessageToKubeRefusesWhatProtojsonRefuses(t *testing.T) {
	bad := []proto.Message{
		&pf.Pod{Metadata: &pf.ObjectMeta{Name: "a\xffb"}},
		&pf.Pod{Metadata: &pf.ObjectMeta{Name: "p", CreationTimestamp: timestamp(maxTimestampSeconds+1, 0)}},
		&pf.Pod{Metadata: &pf.ObjectMeta{Name: "p", CreationTimestamp: timestamp(0, -1)}},
		managedFields(structpb.NewNumberValue(math.NaN())),
		managedFields(structpb.NewStringValue("a\xffb")),
		managedFields(&structpb.Value{}),
	}
	for i, m := range bad {
		if _, err := protojsonToKube(m, nil); err == nil {
			t.Fatalf("#%d: protojson accepted it", i)
		}
		if got, err := messageToKube(m.ProtoReflect(), nil); err == nil {
			t.Errorf("#%d: converted to %v, want an error", i, got)
		}
	}
}

// TestFloatToKubeMatchesProtojson: no kind has a float field yet, so the
// float spelling is checked against protojson's directly.
func TestFloatToKubeMatchesProtojson(t *testing.T) {
	for _, x := range []float64{0, 1.5, -0.25, 1e-7, 1e-6, 3e21, 1e21, 123456789.125, 0.1, math.NaN(), math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64, math.MaxFloat64} {
		want := map[string]any{}
		for _, m := range []proto.Message{wrapperspb.Double(x), wrapperspb.Float(float32(x))} {
			j, err := protojson.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			tree, err := jsonTree(j)
			if err != nil {
				t.Fatal(err)
			}
			bits := 64
			if _, ok := m.(*wrapperspb.FloatValue); ok {
				bits = 32
			}
			want[fmt.Sprint(bits)] = tree
		}
		got := map[string]any{"64": floatToKube(x, 64), "32": floatToKube(float64(float32(x)), 32)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%v (-protojson +direct):\n%s", x, diff)
		}
	}
}

func managedFields(v *structpb.Value) *pf.Pod {
	return &pf.Pod{Metadata: &pf.ObjectMeta{Name: "p", ManagedFields: []*pf.ManagedFieldsEntry{
		{Manager: "m", FieldsV1: &structpb.Struct{Fields: map[string]*structpb.Value{"f:x": v}}}}}}
}

func timestamp(secs int64, nanos int32) *timestamppb.Timestamp {
	return &timestamppb.Timestamp{Seconds: secs, Nanos: nanos}
}

// kubeFiller sets a field with probability 2/3, lists and maps to 1-2
// entries; timestamps within Kubernetes' range and Structs of managed
// fields as a whole.
var kubeFiller = vttest.Filler{
	Scalar:  randomScalar,
	Keep:    func(r *rand.Rand, _ protoreflect.Message, _ protoreflect.FieldDescriptor) bool { return r.IntN(3) != 0 },
	Entries: func(r *rand.Rand) int { return 1 + r.IntN(2) },
	Message: func(r *rand.Rand, m protoreflect.Message) bool {
		md := m.Descriptor()
		switch md.FullName() {
		case timestampName:
			f := md.Fields()
			m.Set(f.ByName("seconds"), protoreflect.ValueOfInt64(r.Int64N(maxTimestampSeconds)))
			nanos := []int32{0, 123_000_000, 123_456_000, 123_456_789, 1}[r.IntN(5)]
			m.Set(f.ByName("nanos"), protoreflect.ValueOfInt32(nanos))
			return true
		case "google.protobuf.Struct":
			s, err := structpb.NewStruct(map[string]any{"f:spec": map[string]any{"f:x": map[string]any{}}, "n": 1.5, "big": 3e21, "l": []any{"a", true, nil, 7.0}})
			if err != nil {
				panic(err)
			}
			proto.Merge(m.Interface(), s)
			return true
		}
		return false
	},
}

// fillMessage sets m's fields with kubeFiller, to depth 6.
func fillMessage(r *rand.Rand, m protoreflect.Message) { kubeFiller.Fill(r, m, 6) }

func randomScalar(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	words := []string{"", "a", "web-1", "Ünïcode ✓", `quote"and\back`, "1.5"}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(words[r.IntN(len(words))])
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(words[r.IntN(len(words))]))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32([]int32{0, 1, -7, math.MaxInt32, math.MinInt32}[r.IntN(5)])
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64([]int64{0, 1, -7, math.MaxInt64, math.MinInt64, 1 << 53}[r.IntN(6)])
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32([]uint32{0, 1, math.MaxUint32}[r.IntN(3)])
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64([]uint64{0, 1, math.MaxUint64}[r.IntN(3)])
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(randomFloat(r)))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(randomFloat(r))
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if r.IntN(5) == 0 {
			return protoreflect.ValueOfEnum(999) // not defined: a number
		}
		return protoreflect.ValueOfEnum(vals.Get(r.IntN(vals.Len())).Number())
	}
	panic("no scalar of kind " + fd.Kind().String())
}

func randomFloat(r *rand.Rand) float64 {
	return []float64{0, 1.5, -0.25, 1e-7, 3e21, 123456789.125, math.NaN(), math.Inf(1), math.Inf(-1), 0.1}[r.IntN(10)]
}

// BenchmarkPodToKube: a Running pod with a token volume, the form the api
// stage writes for every create, delete and watch event.
func BenchmarkPodToKube(b *testing.B) {
	pod := benchPod()
	k := kindByProto[pod.ProtoReflect().Descriptor().FullName()]
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := messageToKube(pod.ProtoReflect(), k.shape); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		for b.Loop() {
			if _, err := protojsonToKube(pod, k.shape); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ToKube-json", func(b *testing.B) { // the JSON round trip ToKube replaced
		for b.Loop() {
			tree, err := protojsonToKube(pod, k.shape)
			if err != nil {
				b.Fatal(err)
			}
			tree["apiVersion"], tree["kind"] = k.apiVersion, k.kind
			j, err := json.Marshal(tree)
			if err != nil {
				b.Fatal(err)
			}
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(j, k.newKube()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ToKube", func(b *testing.B) {
		for b.Loop() {
			if _, err := ToKube(pod); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchPod() *pf.Pod {
	j := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-7d9f-abcde","namespace":"default","uid":"0b7c7d0e-1111-2222-3333-444455556666","resourceVersion":"123456","creationTimestamp":"2026-12-07T05:00:00Z","labels":{"app":"web","pod-template-hash":"7d9f"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f","uid":"aaaa-bbbb","controller":true,"blockOwnerDeletion":true}]},
"spec":{"nodeName":"sim-node-0042","serviceAccountName":"default","restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","schedulerName":"default-scheduler","enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority","priority":0,
"containers":[{"name":"web","image":"registry.k8s.io/pause:3.10","ports":[{"containerPort":8080,"protocol":"TCP"}],"resources":{"requests":{"cpu":"100m","memory":"64Mi"}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent","volumeMounts":[{"name":"kube-api-access-x7k2p","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}]}],
"volumes":[{"name":"kube-api-access-x7k2p","projected":{"defaultMode":420,"sources":[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}},{"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}},{"downwardAPI":{"items":[{"path":"namespace","fieldRef":{"apiVersion":"v1","fieldPath":"metadata.namespace"}}]}}]}}],
"tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]},
"status":{"phase":"Running","hostIP":"10.0.0.42","podIP":"10.244.42.7","podIPs":[{"ip":"10.244.42.7"}],"startTime":"2026-12-07T05:00:01Z","qosClass":"Burstable",
"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-12-07T05:00:02Z"},{"type":"PodScheduled","status":"True","lastTransitionTime":"2026-12-07T05:00:00Z"}],
"containerStatuses":[{"name":"web","ready":true,"started":true,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":"sha256:abc","containerID":"sim://abc","state":{"running":{"startedAt":"2026-12-07T05:00:02Z"}}}]}}`)
	objs, err := Decode(j)
	if err != nil {
		panic(err)
	}
	return objs[0].Message.(*pf.Pod)
}

// protojsonToKube is the reference messageToKube is held to: m through
// protojson and a JSON decoder into toKube.
func protojsonToKube(m proto.Message, t reflect.Type) (map[string]any, error) {
	pj, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	tree, err := jsonTree(pj)
	if err != nil {
		return nil, err
	}
	out, _ := toKube(tree, m.ProtoReflect().Descriptor(), t).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	return out, nil
}

// The conversion messageToKube replaced, kept as its reference.
// toKube converts protojson JSON v of message md to Kubernetes JSON.
func toKube(v any, md protoreflect.MessageDescriptor, t reflect.Type) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	s := shapeOf(md, t)
	out := make(map[string]any, len(obj))
	for key, val := range obj {
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			continue // cannot happen for protojson output
		}
		out[s.kubeName[fd.Number()]] = valueToKube(val, fd, s.kubeType[fd.Number()])
	}
	return out
}

func valueToKube(v any, fd protoreflect.FieldDescriptor, t reflect.Type) any {
	switch {
	case fd.IsMap():
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		out := make(map[string]any, len(m))
		for k, e := range m {
			out[k] = scalarOrMessageToKube(e, fd.MapValue(), t)
		}
		return out
	case fd.IsList():
		l, ok := v.([]any)
		if !ok {
			return v
		}
		out := make([]any, len(l))
		for i, e := range l {
			out[i] = scalarOrMessageToKube(e, fd, t)
		}
		return out
	}
	return scalarOrMessageToKube(v, fd, t)
}

func scalarOrMessageToKube(v any, fd protoreflect.FieldDescriptor, t reflect.Type) any {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if s, ok := v.(string); ok {
			return json.Number(s) // protojson quotes 64-bit integers
		}
		return v
	case protoreflect.MessageKind, protoreflect.GroupKind:
	default:
		return v
	}
	md := fd.Message()
	switch {
	case md.FullName() == intOrStringName:
		m, _ := v.(map[string]any)
		if s, ok := m["strVal"]; ok {
			return s
		}
		if n, ok := m["intVal"]; ok {
			return n
		}
		return json.Number("0") // unset: Kubernetes' zero IntOrString
	case md.FullName().Parent() == "google.protobuf":
		return microTime(v, t)
	}
	return toKube(v, md, t)
}

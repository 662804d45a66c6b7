package manifest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	kcorev1 "k8s.io/api/core/v1"

	pf "github.com/podflow/podflow/proto/corev1"
)

// kubeField is one field of the k8s.io/api Pod type: its path (json tags,
// "[*]" for list items and map values) and whether podflow's proto has a
// place for it.
type kubeField struct {
	path    string
	leaf    bool
	inProto bool
}

var marshaler = reflect.TypeFor[json.Marshaler]()

// podFieldsByReflection walks k8s.io/api's corev1.Pod — PodSpec,
// Container, EphemeralContainer, Volume and VolumeSource, the security
// contexts, probes, handlers, env ... — recursing into struct fields with
// their json tags as paths, alongside podflow's proto descriptor.
func podFieldsByReflection() []kubeField {
	var out []kubeField
	var walk func(t reflect.Type, md protoreflect.MessageDescriptor, path string, seen []reflect.Type)
	walk = func(t reflect.Type, md protoreflect.MessageDescriptor, path string, seen []reflect.Type) {
		if slices.Contains(seen, t) {
			panic("recursive type at " + path)
		}
		fields := map[string]reflect.Type{}
		jsonFields(t, fields)
		for name, ft := range fields {
			p := joinPath(path, name)
			var fd protoreflect.FieldDescriptor
			if md != nil {
				fd = shapeOf(md, t).byKube[name]
			}
			st := elemStruct(ft)
			leaf := st == nil || st.Implements(marshaler) || reflect.PointerTo(st).Implements(marshaler)
			out = append(out, kubeField{path: p, leaf: leaf, inProto: fd != nil})
			if leaf {
				continue
			}
			var sub protoreflect.MessageDescriptor
			switch {
			case fd == nil:
			case fd.IsMap():
				sub = fd.MapValue().Message()
			default:
				sub = fd.Message()
			}
			if k := ft.Kind(); k == reflect.Slice || k == reflect.Map {
				p += "[*]"
			}
			walk(st, sub, p, append(seen, t))
		}
	}
	walk(reflect.TypeFor[kcorev1.Pod](), (&pf.Pod{}).ProtoReflect().Descriptor(), "", nil)
	slices.SortFunc(out, func(a, b kubeField) int { return strings.Compare(a.path, b.path) })
	return out
}

// TestEveryPodFieldIsListed is the rule of issue 16: every field of a
// k8s.io/api Pod is honoured or refused, never neither and never both; an
// honoured field is one the proto holds (else it would be dropped); every
// listed path exists (no stale entries).
func TestEveryPodFieldIsListed(t *testing.T) {
	fields := podFieldsByReflection()
	if len(fields) < 1000 {
		t.Fatalf("walked %d Pod fields; the walk is broken", len(fields))
	}
	exists := map[string]bool{"apiVersion": true, "kind": true}
	for _, f := range fields {
		exists[f.path] = true
	}
	t.Run("on exactly one list", func(t *testing.T) {
		for p := range podHonoured {
			if _, ok := podRefused[p]; ok {
				t.Errorf("%s is both honoured and refused", p)
			}
		}
	})
	t.Run("no stale entries", func(t *testing.T) {
		for _, m := range []map[string]bool{keys(podHonoured), keys(podRefused)} {
			for p := range m {
				if !exists[p] {
					t.Errorf("listed %s is not a field of k8s.io/api's Pod", p)
				}
			}
		}
	})
	for _, f := range fields {
		if !f.leaf || f.path == "apiVersion" || f.path == "kind" {
			continue
		}
		r, ok := ruleFor(f.path)
		switch {
		case !ok:
			t.Errorf("%s is on neither list: honour it (with a test) or refuse it in fields.go", f.path)
		case r.honoured && !f.inProto && r.path != "status" && !strings.HasPrefix(f.path, "status."):
			t.Errorf("%s is honoured (by %s) but the proto has no place for it: it would be dropped", f.path, r.path)
		}
	}
}

func keys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// TestDecodeRefusesPodFields is the `podflow apply` door: Decode refuses
// each field the proto cannot hold, naming its path, and accepts the
// Kubernetes defaults of refused fields.
func TestDecodeRefusesPodFields(t *testing.T) {
	tests := []struct {
		name, spec, container string
		refused               []string // nil: accepted
	}{
		{name: "pod-level resources", spec: "resources: {limits: {cpu: 10m}}", refused: []string{"spec.resources"}},
		{name: "runtimeClassName and overhead are honoured", spec: "runtimeClassName: kata\n  overhead: {cpu: 10m}"},
		{name: "shareProcessNamespace is honoured", spec: "shareProcessNamespace: true"},
		{name: "scheduling fields are honoured", spec: "topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]\n  schedulingGates: [{name: wait}]\n  affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: zone}]}}"},
		{name: "volumes", spec: "volumes: [{name: a, projected: {sources: [{serviceAccountToken: {path: t}}]}}, {name: b, nfs: {server: s, path: /}}, {name: c, downwardAPI: {items: [{path: podname, fieldRef: {fieldPath: metadata.name}, user: 1000}]}}]",
			refused: []string{"spec.volumes[1].nfs", "spec.volumes[2].downwardAPI.items[0].user"}},
		{name: "projected serviceAccountToken is honoured", spec: "volumes: [{name: a, projected: {sources: [{serviceAccountToken: {path: token, audience: vault, expirationSeconds: 600}}]}}]"},
		{name: "projected trust bundle, pod certificate, owner", spec: "volumes: [{name: a, projected: {sources: [{configMap: {name: x}}, {clusterTrustBundle: {name: b, path: ca.pem}}, {podCertificate: {signerName: s/x, keyType: ED25519}}, {secret: {name: s1, items: [{key: k, path: p, user: 1}]}}]}}]",
			refused: []string{"spec.volumes[0].projected.sources[1].clusterTrustBundle", "spec.volumes[0].projected.sources[2].podCertificate", "spec.volumes[0].projected.sources[3].secret.items[0].user"}},
		{name: "projected configMap, secret, downwardAPI", spec: "volumes: [{name: a, projected: {defaultMode: 0440, sources: [{configMap: {name: x, optional: true, items: [{key: k, path: p, mode: 0400}]}}, {secret: {name: s1}}, {downwardAPI: {items: [{path: name, fieldRef: {apiVersion: v1, fieldPath: metadata.name}}]}}]}}]"},
		{name: "imagePullSecrets, hostnameOverride", spec: "imagePullSecrets: [{name: reg}]\n  hostnameOverride: h\n  dnsConfig: {nameservers: [1.1.1.1]}",
			refused: []string{"spec.hostnameOverride"}},
		{name: "hostname, subdomain, hostAliases, SELinux, enableServiceLinks are honoured",
			spec:      "hostname: h\n  subdomain: s\n  hostAliases: [{ip: 1.2.3.4, hostnames: [a, b]}]\n  enableServiceLinks: true\n  securityContext: {seLinuxOptions: {level: \"s0:c1,c2\"}, seLinuxChangePolicy: MountOption}\n  volumes: [{name: v, emptyDir: {}}]",
			container: "securityContext: {seLinuxOptions: {type: container_t}}, volumeMounts: [{name: v, mountPath: /v, subPathExpr: $(POD)}]"},
		{name: "grpc probe, stopSignal", container: "livenessProbe: {grpc: {port: 9000, service: s, mode: Plaintext}}, lifecycle: {stopSignal: SIGUSR1}",
			refused: []string{"spec.containers[0].lifecycle.stopSignal"}},
		{name: "grpc probe over TLS", container: "readinessProbe: {grpc: {port: 9000, mode: TLS}}",
			refused: []string{"spec.containers[0].readinessProbe.grpc.mode"}},
		{name: "fieldRef apiVersion v1 is the default", container: "env: [{name: POD, valueFrom: {fieldRef: {apiVersion: v1, fieldPath: metadata.name}}}]"},
		{name: "os linux", spec: "os: {name: linux}"},
		{name: "os windows", spec: "os: {name: windows}", refused: []string{"spec.os.name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec:\n  " + tc.spec + "\n  containers: [{name: c, image: i"
			if tc.container != "" {
				doc += ", " + tc.container
			}
			doc += "}]\n"
			_, err := Decode([]byte(doc))
			if tc.refused == nil {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUnsupportedField) {
				t.Fatalf("Decode: %v, want ErrUnsupportedField", err)
			}
			name, errs, _ := RefusedFields(err)
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
				if !strings.HasPrefix(e.Detail, "podflow does not support ") {
					t.Errorf("%s: detail %q", e.Field, e.Detail)
				}
			}
			if name != "p" || !slices.Equal(got, tc.refused) {
				t.Errorf("refused %q (pod %q), want %q", got, name, tc.refused)
			}
		})
	}
}

// TestStatusIsTheSystems: a Pod's status (from `kubectl get -o yaml` of a
// real cluster) is not refused, whatever fields it has: kube-apiserver
// replaces it on create, and so does podflow.
func TestStatusIsTheSystems(t *testing.T) {
	decodeOne(t, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: i}]}\nstatus: {phase: Running, resize: InProgress, hostIPs: [{ip: 10.0.0.1}]}\n"))
}

// TestPodWarnings: where kube-apiserver accepts a pod with a warning, so
// does podflow, with the same words.
func TestPodWarnings(t *testing.T) {
	obj := decodeOne(t, []byte(`
apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations: {seccomp.security.alpha.kubernetes.io/pod: runtime/default}
spec:
  nodeSelector: {beta.kubernetes.io/os: linux, kubernetes.io/arch: amd64}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: failure-domain.beta.kubernetes.io/zone, operator: In, values: [a]}]}]
  containers: [{name: c, image: i}]
`))
	want := []string{
		`metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]: non-functional in v1.27+; use the "seccompProfile" field instead`,
		`spec.nodeSelector[beta.kubernetes.io/os]: deprecated since v1.14; use "kubernetes.io/os" instead`,
		`spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key: failure-domain.beta.kubernetes.io/zone is deprecated since v1.17; use "topology.kubernetes.io/zone" instead`,
	}
	if diff := cmpDiff(want, obj.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// TestHonouredFieldsNameTheirTests: every honoured field points at test
// files that exist.
func TestHonouredFieldsNameTheirTests(t *testing.T) {
	checked := map[string]bool{}
	for p, tests := range podHonoured {
		if tests == "" {
			t.Errorf("%s is honoured without a test", p)
		}
		for _, f := range strings.Fields(tests) {
			if checked[f] {
				continue
			}
			checked[f] = true
			if _, err := os.Stat(filepath.Join("..", "..", f)); err != nil {
				t.Errorf("%s: test file %s: %v", p, f, err)
			}
		}
	}
}

// TestExamplesUseNoRefusedField: the repository's example manifests apply
// under the field rule, at both doors.
func TestExamplesUseNoRefusedField(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// sidecar-injector.yaml's caBundle is a placeholder its comment
			// tells the user to fill (base64 of the server's certificate).
			b = bytes.ReplaceAll(b, []byte("CA_BUNDLE"), []byte(base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----"))))
			objs, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			for _, o := range objs {
				if pod, ok := o.Message.(*pf.Pod); ok {
					if errs := RefusedPodFields(pod); len(errs) > 0 {
						t.Errorf("refused: %v", errs)
					}
				}
			}
		})
	}
}

// TestRefusedFieldsInAList: a Pod inside a v1 List is judged as at top
// level; the error path keeps its place in the list.
func TestRefusedFieldsInAList(t *testing.T) {
	list := `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: ok}
  spec: {dnsPolicy: ClusterFirst, containers: [{name: c, image: i}]}
  status: {resize: InProgress}
- apiVersion: v1
  kind: Pod
  metadata: {name: bad}
  spec: {resources: {limits: {cpu: 10m}}, containers: [{name: c, image: i}]}
`
	_, err := Decode([]byte(list))
	name, errs, ok := RefusedFields(err)
	if !ok || name != "bad" || len(errs) != 1 || errs[0].Field != "items[1].spec.resources" {
		t.Fatalf("Decode: %v; refused %q %v", err, name, errs)
	}
	if _, err := Decode([]byte(list[:strings.Index(list, "- apiVersion: v1\n  kind: Pod\n  metadata: {name: bad}")])); err != nil {
		t.Fatalf("the first item alone: %v", err)
	}
}

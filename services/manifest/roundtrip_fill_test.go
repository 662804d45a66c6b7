package manifest

import (
	"hash/fnv"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	kcorev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/randfill"
)

// TestHonouredFieldsRoundTrip is the honoured list's other half: a field
// podflow honours keeps its value on the way through the proto. Random
// Pods with every honoured field filled (refused ones cleared; a status
// field the proto has no place for too, as the system replaces status)
// go Kubernetes → proto → Kubernetes and come back semantically equal —
// what `kubectl get -o yaml` shows is what was applied. A conversion that
// renames, truncates or drops an honoured field fails here, naming it.
func TestHonouredFieldsRoundTrip(t *testing.T) {
	inProto := map[string]bool{}
	for _, f := range podFieldsByReflection() {
		inProto[f.path] = f.inProto
	}
	f := randfill.NewWithSeed(16).NilChance(0.25).NumElements(1, 2).Funcs(
		func(s *string, c randfill.Continue) { *s = randWord(c) },
		func(q *resource.Quantity, c randfill.Continue) {
			*q = resource.MustParse([]string{"1", "250m", "64Mi", "2Gi", "100"}[c.Intn(5)])
		},
		func(tm *metav1.Time, c randfill.Continue) {
			*tm = metav1.Unix(1_700_000_000+c.Int63n(1<<26), 0).Rfc3339Copy()
		},
		func(x *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*x = intstr.FromInt32(1 + c.Int31n(65534))
			} else {
				*x = intstr.FromString(randWord(c))
			}
		},
		func(fv *metav1.FieldsV1, c randfill.Continue) {
			fv.Raw = []byte(`{"f:metadata":{"f:labels":{"f:` + randWord(c) + `":{}}}}`)
		},
		// Strings are words and maps hold no empty keys; free-form bytes
		// are JSON-safe already.
		func(m *map[string]string, c randfill.Continue) {
			*m = map[string]string{}
			for range 1 + c.Intn(2) {
				(*m)[randWord(c)] = randWord(c)
			}
		},
	)
	const pods = 300
	covered := map[string]bool{}
	for i := range pods {
		var pod kcorev1.Pod
		f.Fill(&pod)
		pod.TypeMeta = metav1.TypeMeta{}
		keepHonoured(reflect.ValueOf(&pod).Elem(), "", inProto, covered)
		m, err := FromKube(&pod)
		if err != nil {
			t.Fatalf("pod %d: FromKube of honoured fields only: %v", i, err)
		}
		back, err := ToKube(m)
		if err != nil {
			t.Fatalf("pod %d: ToKube: %v", i, err)
		}
		got := back.(*kcorev1.Pod)
		got.TypeMeta = metav1.TypeMeta{}
		if !apiequality.Semantic.DeepEqual(&pod, got) {
			t.Fatalf("pod %d does not survive the proto (-applied +read back):\n%s", i, cmp.Diff(&pod, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })))
		}
	}
	// The fill must reach the honoured leaves, or the test proves little.
	var missed []string
	for p, tests := range podHonoured {
		if tests != "" && inProto[p] && !covered[p] && !strings.HasPrefix(p, "status") {
			missed = append(missed, p)
		}
	}
	if len(missed) > 0 {
		t.Errorf("%d honoured fields never filled in %d pods: %v", len(missed), pods, missed)
	}
}

// keepHonoured clears, below v at path, every field that is not honoured
// (refused, unlisted, or a status field without a place in the proto) and
// records the honoured paths it keeps filled.
func keepHonoured(v reflect.Value, path string, inProto, covered map[string]bool) {
	switch v.Kind() {
	case reflect.String: // named string types (UID, PodPhase, ...) too
		if v.Len() > 0 && v.CanSet() {
			v.SetString(wordOf(v.String()))
		}
	case reflect.Pointer:
		if !v.IsNil() {
			keepHonoured(v.Elem(), path, inProto, covered)
		}
	case reflect.Slice:
		for i := range v.Len() {
			keepHonoured(v.Index(i), path+"[*]", inProto, covered)
		}
	case reflect.Struct:
		if v.Addr().Type().Implements(marshaler) || v.Type().Implements(marshaler) {
			return // a leaf: Time, Quantity, IntOrString
		}
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			fv := v.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if sf.Anonymous && name == "" {
				keepHonoured(fv, path, inProto, covered)
				continue
			}
			if name == "" || name == "-" || !sf.IsExported() {
				continue
			}
			p := joinPath(path, name)
			if r, ok := ruleFor(p); !(ok && r.honoured && inProto[p]) && !honouredBelow(p) {
				fv.SetZero()
				continue
			}
			if fv.Kind() == reflect.Pointer && !fv.IsNil() && fv.Elem().IsZero() && (zeroIsUnset[p] || fv.Elem().Kind() == reflect.String) {
				fv.SetZero()
			}
			if !fv.IsZero() {
				covered[p] = true
			}
			keepHonoured(fv, p, inProto, covered)
		}
	}
}

// zeroIsUnset: optional fields where Kubernetes means the same by the zero
// value and by no value, and the proto keeps no difference (it reads back
// unset). So are optional strings set to "": Kubernetes' validation refuses
// "" for each of them (an enum, a name, a profile) or defaults it.
var zeroIsUnset = map[string]bool{
	"metadata.ownerReferences[*].controller":         true, // not the controller
	"metadata.ownerReferences[*].blockOwnerDeletion": true, // does not block
}

// honouredBelow reports whether a field below p is honoured.
func honouredBelow(p string) bool { return honouredParents()[p] }

// honouredParents are the paths above an honoured field.
var honouredParents = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for h := range podHonoured {
		for p := parentPath(h); p != ""; p = parentPath(p) {
			m[p] = true
		}
	}
	return m
})

// wordOf maps any string to a short lowercase word.
func wordOf(s string) string {
	h := fnv.New64a()
	h.Write([]byte(s))
	n := h.Sum64()
	b := make([]byte, 1+n%8)
	for i := range b {
		b[i] = "abcdefghijklmnopqrstuvwxyz"[(n>>(5*i+3))%26]
	}
	return string(b)
}

// randWord is a short lowercase word: a valid name, key and value alike.
func randWord(c randfill.Continue) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 1+c.Intn(8))
	for i := range b {
		b[i] = letters[c.Intn(len(letters))]
	}
	b[0] = letters[c.Intn(26)]
	return string(b)
}

package manifest

import (
	"encoding/json"
	"fmt"
	"reflect"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	pf "github.com/podflow/podflow/proto/corev1"
)

// Format is a manifest encoding.
type Format int

const (
	// FormatYAML is YAML as kubectl prints it (-o yaml).
	FormatYAML Format = iota
	// FormatJSON is indented JSON as kubectl prints it (-o json).
	FormatJSON
)

func (f Format) String() string {
	switch f {
	case FormatYAML:
		return "yaml"
	case FormatJSON:
		return "json"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// Encode writes m as a Kubernetes manifest with apiVersion and kind. For
// Kubernetes kinds the output is exactly what Kubernetes writes for the
// equivalent k8s.io/api object (it goes through ToKube).
func Encode(m proto.Message, format Format) ([]byte, error) {
	if format != FormatYAML && format != FormatJSON {
		return nil, fmt.Errorf("%w: format %s", ErrMalformed, format)
	}
	if u, ok := m.(*pf.Unstructured); ok {
		obj, err := genericToKube(u)
		if err != nil {
			return nil, err
		}
		return marshalManifest(obj, u.GetKind(), format)
	}
	k, err := kindOfMessage(m)
	if err != nil {
		return nil, err
	}
	obj, err := toKubeObject(k, m)
	if err != nil {
		return nil, err
	}
	return marshalManifest(obj, k.kind, format)
}

func marshalManifest(obj any, kind string, format Format) ([]byte, error) {
	j, err := json.MarshalIndent(obj, "", "    ")
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", kind, err)
	}
	if format == FormatJSON {
		return append(j, '\n'), nil
	}
	return yaml.JSONToYAML(j)
}

// ToKube converts m to its k8s.io/api object (*corev1.Pod for a Pod,
// *appsv1.Deployment for a Deployment's Unstructured, ...), with TypeMeta
// set; an Unstructured of a kind with no Go type becomes an
// *unstructured.Unstructured.
func ToKube(m proto.Message) (runtime.Object, error) {
	if u, ok := m.(*pf.Unstructured); ok {
		return genericToKube(u)
	}
	k, err := kindOfMessage(m)
	if err != nil {
		return nil, err
	}
	return toKubeObject(k, m)
}

// FromKube converts a k8s.io/api object (a pointer, as client-go returns
// them; TypeMeta may be empty) to its podflow proto: a generic kind's
// (services/objects) to its *corev1.Unstructured, where an
// *unstructured.Unstructured must carry its apiVersion and kind. Fields
// podflow does not keep are dropped silently; Decode reports them as
// warnings.
func FromKube(o runtime.Object) (proto.Message, error) {
	if o == nil || reflect.ValueOf(o).IsNil() {
		return nil, fmt.Errorf("%w: nil object", ErrUnsupportedKind)
	}
	k := kindByKube[reflect.TypeOf(o)]
	if k == nil {
		// A generic kind: its TypeMeta's, else its Go type's.
		if gvk, ok := kubeGVK(o); ok {
			if _, ok := genericKind(gvk.GroupVersion().String(), gvk.Kind); ok {
				u, err := genericFromKube(o, gvk.GroupVersion().String(), gvk.Kind)
				if err != nil {
					return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, gvk.Kind, err)
				}
				return u, nil
			}
		}
		return nil, fmt.Errorf("%w: Go type %T", ErrUnsupportedKind, o)
	}
	tree, err := kubeTree(o.DeepCopyObject())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, k.kind, err)
	}
	msg, drops, err := fromTree(k, tree, "")
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, k.kind, err)
	}
	if k.kind == "Pod" {
		if errs := droppedPodFields(drops, ""); len(errs) > 0 {
			base := &Error{APIVersion: k.apiVersion, Kind: k.kind}
			if m, ok := o.(interface{ GetName() string }); ok {
				base.Name = m.GetName()
			}
			if m, ok := o.(interface{ GetNamespace() string }); ok {
				base.Namespace = m.GetNamespace()
			}
			return nil, refusedError(base, errs)
		}
	}
	return msg, nil
}

func kindOfMessage(m proto.Message) (*kind, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil message", ErrUnsupportedKind)
	}
	name := m.ProtoReflect().Descriptor().FullName()
	k := kindByProto[name]
	if k == nil {
		return nil, fmt.Errorf("%w: proto message %q", ErrUnsupportedKind, name)
	}
	return k, nil
}

// kubeJSON is m as an unstructured Kubernetes object with apiVersion and
// kind.
func kubeJSON(k *kind, m proto.Message) (map[string]any, error) {
	out, err := messageToKube(m.ProtoReflect(), k.shape)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, k.kind, err)
	}
	out["apiVersion"], out["kind"] = k.apiVersion, k.kind
	return out, nil
}

func toKubeObject(k *kind, m proto.Message) (runtime.Object, error) {
	tree, err := kubeJSON(k, m)
	if err != nil {
		return nil, err
	}
	obj := k.newKube()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tree, obj); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, k.kind, err)
	}
	return obj, nil
}

// nativeNumbers replaces, in place, the json.Numbers of a JSON tree with
// the int64 or float64 an unstructured object holds.
func nativeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if n, ok := e.(json.Number); ok {
				x[k] = nativeNumber(n)
			} else {
				nativeNumbers(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = nativeNumbers(e)
		}
	case json.Number:
		return nativeNumber(x)
	}
	return v
}

func nativeNumber(n json.Number) any {
	if i, err := n.Int64(); err == nil {
		return i
	}
	f, _ := n.Float64()
	return f
}

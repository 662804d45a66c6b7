package crd

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decode reads a request body (JSON or YAML) holding an object of this
// version as kube-apiserver's custom resource handlers do: decoded into
// an Unstructured, pruned and coerced by the version's schema and
// defaulted. strict asks for field validation (fieldValidation Strict or
// Warn): the duplicate fields of the body and the unknown fields pruning
// dropped are returned as strict errors (`duplicate field "x"`,
// `unknown field "spec.foo"`), which the caller refuses (Strict) or turns
// into warnings. err is a body that does not decode at all; the object's
// apiVersion and kind are the caller's to check.
func (v *Version) Decode(body []byte, strict bool) (u *unstructured.Unstructured, strictErrs []error, err error) {
	data := body
	if !utilyaml.IsJSONBuffer(body) {
		if strict {
			if _, err := yaml.YAMLToJSONStrict(body); err != nil {
				strictErrs = append(strictErrs, err)
			}
		}
		if data, err = yaml.YAMLToJSON(body); err != nil {
			return nil, nil, err
		}
	}
	m := map[string]any{}
	if strict {
		errs, err := kjson.UnmarshalStrict(data, &m)
		if err != nil {
			return nil, nil, err
		}
		strictErrs = append(strictErrs, errs...)
	} else if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &m); err != nil {
		return nil, nil, err
	}
	if m == nil {
		return nil, nil, fmt.Errorf("Object 'Kind' is missing in '%s'", body)
	}
	u = &unstructured.Unstructured{Object: m}
	if u.GetAPIVersion() != v.GroupVersion() || u.GetKind() != v.def.names.Kind {
		return u, strictErrs, nil // the caller refuses it, naming both
	}
	unknown, err := v.def.coerce(u, false, strict)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range unknown {
		strictErrs = append(strictErrs, fmt.Errorf("unknown field %q", p))
	}
	v.def.defaults(u)
	return u, strictErrs, nil
}

// StrictError is kube-apiserver's wording of strict decoding errors:
// `strict decoding error: unknown field "spec.foo", duplicate field "x"`.
func StrictError(errs []error) error { return runtime.NewStrictDecodingError(errs) }

package apiserver_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

// TestOpenAPIFields: the served OpenAPI v3 schema of each Kubernetes kind
// has a documented property for every JSON field of the k8s.io/api Go
// type podflow serves it as, at every depth (a Pod's initContainers'
// restartPolicy, its containers' resizePolicy, …): the schemas are those
// of the types served, not of an older release.
func TestOpenAPIFields(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	for _, c := range []struct {
		gv  string
		obj any
	}{
		{"api/v1", corev1.Pod{}}, {"api/v1", corev1.Node{}}, {"api/v1", corev1.Service{}},
		{"api/v1", corev1.Namespace{}}, {"api/v1", corev1.ServiceAccount{}}, {"api/v1", corev1.ConfigMap{}},
		{"api/v1", corev1.Secret{}}, {"api/v1", corev1.Event{}}, {"api/v1", corev1.LimitRange{}},
		{"api/v1", corev1.Endpoints{}}, {"api/v1", corev1.PodList{}},
		{"apis/discovery.k8s.io/v1", discoveryv1.EndpointSlice{}},
		{"apis/rbac.authorization.k8s.io/v1", rbacv1.ClusterRoleBinding{}}, {"apis/rbac.authorization.k8s.io/v1", rbacv1.Role{}},
		{"apis/events.k8s.io/v1", eventsv1.Event{}}, {"apis/scheduling.k8s.io/v1", schedulingv1.PriorityClass{}},
		{"apis/authorization.k8s.io/v1", authorizationv1.SelfSubjectAccessReview{}},
		{"apis/authorization.k8s.io/v1", authorizationv1.SelfSubjectRulesReview{}},
		{"apis/authentication.k8s.io/v1", authenticationv1.SelfSubjectReview{}},
		{"apis/metrics.k8s.io/v1beta1", metricsv1beta1.PodMetrics{}}, {"apis/metrics.k8s.io/v1beta1", metricsv1beta1.NodeMetrics{}},
	} {
		typ := reflect.TypeOf(c.obj)
		t.Run(typ.Name(), func(t *testing.T) {
			code, doc, _ := do(t, admin, "GET", s.url+"/openapi/v3/"+c.gv, "", "")
			if code != 200 {
				t.Fatalf("/openapi/v3/%s: %d", c.gv, code)
			}
			schemas, _ := path(doc, "components.schemas").(map[string]any)
			name := c.obj.(interface{ OpenAPIModelName() string }).OpenAPIModelName()
			root, _ := schemas[name].(map[string]any)
			if root == nil {
				t.Fatalf("/openapi/v3/%s has no schema %s", c.gv, name)
			}
			w := fieldWalker{t: t, schemas: schemas, seen: map[reflect.Type]bool{}}
			w.walk(typ, root, typ.Name())
			if w.fields < 3 {
				t.Fatalf("only %d fields walked", w.fields)
			}
		})
	}
}

type fieldWalker struct {
	t       *testing.T
	schemas map[string]any
	seen    map[reflect.Type]bool
	fields  int
}

// undocumented are the fields served whose Go types have no doc comment.
var undocumented = map[string]bool{"PodMetrics.Window": true, "NodeMetrics.Window": true}

var jsonMarshaler = reflect.TypeFor[json.Marshaler]()

// resolve follows a schema's reference ($ref, or v3's allOf wrapper).
func (w *fieldWalker) resolve(s map[string]any, at string) map[string]any {
	ref, _ := s["$ref"].(string)
	if all, ok := s["allOf"].([]any); ok && len(all) == 1 {
		ref, _ = all[0].(map[string]any)["$ref"].(string)
	}
	if ref == "" {
		return s
	}
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	target, _ := w.schemas[name].(map[string]any)
	if !ok || target == nil {
		w.t.Errorf("%s: reference %s resolves to no schema of the document", at, ref)
		return nil
	}
	return target
}

// walk checks that s, the schema at path at, describes Go type t: a
// property for each JSON field of a struct, items for a slice, values for
// a map. Types with their own JSON encoding (Time, Quantity, …) end the walk.
func (w *fieldWalker) walk(t reflect.Type, s map[string]any, at string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s = w.resolve(s, at); s == nil || t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) {
		return
	}
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return
		}
		items, _ := s["items"].(map[string]any)
		if items == nil {
			w.t.Errorf("%s: a list without items: %v", at, s)
			return
		}
		w.walk(t.Elem(), items, at+"[]")
	case reflect.Map:
		vals, _ := s["additionalProperties"].(map[string]any)
		if vals == nil {
			w.t.Errorf("%s: a map without additionalProperties: %v", at, s)
			return
		}
		w.walk(t.Elem(), vals, at+"{}")
	case reflect.Struct:
		if w.seen[t] {
			return
		}
		w.seen[t] = true
		props, _ := s["properties"].(map[string]any)
		w.structFields(t, props, at)
	}
}

func (w *fieldWalker) structFields(t reflect.Type, props map[string]any, at string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			w.structFields(ft, props, at)
			continue
		}
		w.fields++
		p, _ := props[name].(map[string]any)
		if p == nil {
			w.t.Errorf("%s.%s (%s.%s) has no property in the served schema", at, name, t.Name(), f.Name)
			continue
		}
		if d, _ := p["description"].(string); d == "" && !undocumented[t.Name()+"."+f.Name] {
			w.t.Errorf("%s.%s has no description", at, name)
		}
		w.walk(f.Type, p, at+"."+name)
	}
}

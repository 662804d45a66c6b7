package apiserver

import (
	"reflect"
	"strings"

	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// schemaGen builds OpenAPI v3 component schemas from the Go types of the
// Kubernetes API (k8s.io/api) by reflection, honouring their json tags and
// naming each as Kubernetes' definitions are named
// ("io.k8s.api.rbac.v1.Role"). It has no doc comments, which Go does not
// keep: kinds whose upstream document a Go module ships are served from it
// instead (openAPIUpstream).
type schemaGen struct {
	schemas map[string]map[string]any
}

// definitionName is Kubernetes' OpenAPI name of a Go type.
func definitionName(t reflect.Type) string {
	p := t.PkgPath()
	host, rest, _ := strings.Cut(p, "/")
	parts := strings.Split(host, ".")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	name := strings.Join(parts, ".")
	if rest != "" {
		name += "." + strings.ReplaceAll(rest, "/", ".")
	}
	return name + "." + t.Name()
}

var (
	timeType     = reflect.TypeOf(metav1.Time{})
	microType    = reflect.TypeOf(metav1.MicroTime{})
	quantityType = reflect.TypeOf(apiresource.Quantity{})
	intstrType   = reflect.TypeOf(intstr.IntOrString{})
	rawExtType   = reflect.TypeOf(runtime.RawExtension{})
	durationType = reflect.TypeOf(metav1.Duration{})
)

// schema returns the schema of t, a $ref for named structs (added to the
// components once).
func (g *schemaGen) schema(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case timeType, microType:
		return map[string]any{"type": "string", "format": "date-time"}
	case quantityType:
		return map[string]any{"type": "string", "x-kubernetes-int-or-string": true}
	case intstrType:
		return map[string]any{"type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": true}
	case rawExtType:
		return map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
	case durationType:
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return map[string]any{"type": "integer", "format": "int32"}
	case reflect.Int64, reflect.Uint64, reflect.Uint:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number", "format": "double"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"}
		}
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Struct:
		name := definitionName(t)
		if _, ok := g.schemas[name]; !ok {
			g.schemas[name] = nil // being built: recursive types refer to it
			props, required := map[string]any{}, []string{}
			g.fields(t, props, &required)
			s := map[string]any{"type": "object", "properties": props}
			if len(required) > 0 {
				s["required"] = required
			}
			g.schemas[name] = s
		}
		return map[string]any{"allOf": []any{map[string]any{"$ref": "#/components/schemas/" + name}}}
	}
	return map[string]any{}
}

// fields adds t's JSON fields (inlined embedded structs included).
func (g *schemaGen) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				g.fields(ft, props, required)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.schema(f.Type)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") && f.Type.Kind() != reflect.Pointer &&
			f.Type.Kind() != reflect.Slice && f.Type.Kind() != reflect.Map && f.Type.Kind() != reflect.Struct {
			*required = append(*required, name)
		}
	}
}

// kind adds the schema of a top-level kind, marked with its group,
// version and kind as kubectl explain looks it up.
func (g *schemaGen) kind(obj any, group, version, kind string) {
	t := reflect.TypeOf(obj)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	g.schema(t)
	g.schemas[definitionName(t)]["x-kubernetes-group-version-kind"] = []any{map[string]any{"group": group, "version": version, "kind": kind}}
}

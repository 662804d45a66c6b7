package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/podflow/podflow/proto/corev1"
)

// defaultTypeMeta gives a create or update body the apiVersion and kind of
// the resource its URL names when it lacks them, as kube-apiserver decodes
// a body with the URL's group version kind as the default (the Python
// client sends objects without them). A body of another kind, or of a
// version the resource is not served in, is refused with kube-apiserver's
// message.
func defaultTypeMeta(body []byte, res *resource) ([]byte, *corev1.Status) {
	var tm struct {
		APIVersion *string `json:"apiVersion"`
		Kind       *string `json:"kind"`
	}
	trimmed := bytes.TrimSpace(body)
	isJSON := len(trimmed) > 0 && trimmed[0] == '{'
	if isJSON {
		if err := json.Unmarshal(trimmed, &tm); err != nil {
			return body, nil // not one JSON object: the decoder says why
		}
	} else if err := yaml.Unmarshal(body, &tm); err != nil {
		return body, nil
	}
	gv, kind := str(tm.APIVersion), str(tm.Kind)
	if gv != "" && kind != "" {
		return body, typeMetaMismatch(gv, kind, res)
	}
	if gv == "" {
		gv = res.groupVersion()
	}
	if kind == "" {
		kind = res.kind
	}
	if st := typeMetaMismatch(gv, kind, res); st != nil {
		return nil, st
	}
	if isJSON && tm.APIVersion == nil && tm.Kind == nil {
		// The usual case: insert both at the front, leaving every other
		// byte as it was (strict decoding still sees duplicate fields).
		var b bytes.Buffer
		b.Grow(len(trimmed) + 64)
		fmt.Fprintf(&b, `{"apiVersion":%q,"kind":%q`, gv, kind)
		rest := bytes.TrimSpace(trimmed[1:])
		if len(rest) > 0 && rest[0] != '}' {
			b.WriteByte(',')
		}
		b.Write(rest)
		return b.Bytes(), nil
	}
	var tree map[string]any
	if err := yaml.Unmarshal(body, &tree); err != nil || tree == nil {
		return body, nil
	}
	tree["apiVersion"], tree["kind"] = gv, kind
	out, err := json.Marshal(tree)
	if err != nil {
		return body, nil
	}
	return out, nil
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// typeMetaMismatch is kube-apiserver's answer to a body of another kind
// or version than the URL's resource (its decoder's conversion error,
// through transformDecodeError), nil when they match.
func typeMetaMismatch(gv, kind string, res *resource) *corev1.Status {
	switch {
	case kind != res.kind:
		group, version := splitGV(gv)
		return badRequest("%s in version %q cannot be handled as a %s: converting (%s.%s) to (%s.%s): unknown conversion",
			kind, version, res.kind, versionPackage(group, version), kind, internalPackage(res.group), res.kind)
	case gv != res.groupVersion():
		_, version := splitGV(gv)
		return badRequest("%s in version %q cannot be handled as a %s: no kind %q is registered for version %q in scheme %q",
			kind, version, res.kind, kind, gv, "pkg/api/legacyscheme/scheme.go:30")
	}
	return nil
}

func splitGV(gv string) (group, version string) {
	if g, v, ok := strings.Cut(gv, "/"); ok {
		return g, v
	}
	return "", gv
}

// versionPackage and internalPackage name the Go packages of a group's
// versioned and internal types, as Go prints their types in conversion
// errors ("v1.ConfigMap", "core.Secret", "rbac.Role").
func versionPackage(_, version string) string {
	if version == "" {
		return "v1"
	}
	return version
}

func internalPackage(group string) string {
	if group == "" {
		return "core"
	}
	g, _, _ := strings.Cut(group, ".")
	return g
}

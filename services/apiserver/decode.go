package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	k8scorev1 "k8s.io/api/core/v1"
	k8sdiscoveryv1 "k8s.io/api/discovery/v1"
	k8seventsv1 "k8s.io/api/events/v1"
	k8srbacv1 "k8s.io/api/rbac/v1"
	k8sschedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/validate"
)

// kubeTypes are the Go types of the Kubernetes kinds podflow stores, for
// non-strict decoding and strategic merge patches.
var kubeTypes = map[string]func() runtime.Object{
	"Pod":                func() runtime.Object { return &k8scorev1.Pod{} },
	"Node":               func() runtime.Object { return &k8scorev1.Node{} },
	"Service":            func() runtime.Object { return &k8scorev1.Service{} },
	"Endpoints":          func() runtime.Object { return &k8scorev1.Endpoints{} },
	"Namespace":          func() runtime.Object { return &k8scorev1.Namespace{} },
	"ServiceAccount":     func() runtime.Object { return &k8scorev1.ServiceAccount{} },
	"ConfigMap":          func() runtime.Object { return &k8scorev1.ConfigMap{} },
	"Secret":             func() runtime.Object { return &k8scorev1.Secret{} },
	"Event":              func() runtime.Object { return &k8scorev1.Event{} },
	"LimitRange":         func() runtime.Object { return &k8scorev1.LimitRange{} },
	"EndpointSlice":      func() runtime.Object { return &k8sdiscoveryv1.EndpointSlice{} },
	"Role":               func() runtime.Object { return &k8srbacv1.Role{} },
	"ClusterRole":        func() runtime.Object { return &k8srbacv1.ClusterRole{} },
	"RoleBinding":        func() runtime.Object { return &k8srbacv1.RoleBinding{} },
	"ClusterRoleBinding": func() runtime.Object { return &k8srbacv1.ClusterRoleBinding{} },
	"PriorityClass":      func() runtime.Object { return &k8sschedulingv1.PriorityClass{} },
}

// kubeType is the Go type of res's Kubernetes form (a new object of it,
// with its apiVersion and kind for a generic kind); nil for podflow's own
// kinds, which have none.
func kubeType(res *resource) func() runtime.Object {
	if res.unview != nil && res.group == "events.k8s.io" {
		return func() runtime.Object { return &k8seventsv1.Event{} }
	}
	if !res.store.Generic {
		return kubeTypes[res.kind]
	}
	if !manifest.HasGoType(res.groupVersion(), res.kind) {
		return nil
	}
	return func() runtime.Object { return manifest.NewKube(res.groupVersion(), res.kind) }
}

// Field validation directives (the fieldValidation query parameter).
const (
	validationStrict = "Strict"
	validationWarn   = "Warn"
	validationIgnore = "Ignore"
)

func fieldValidation(r *http.Request) (string, *corev1.Status) {
	switch v := r.URL.Query().Get("fieldValidation"); v {
	case "", validationWarn:
		return validationWarn, nil
	case validationStrict, validationIgnore:
		return v, nil
	default:
		return "", badRequest("fieldValidation %q is not supported: use Strict, Warn or Ignore", v)
	}
}

// readBody reads a request body of at most limit bytes within timeout: a
// client that sends its body slower than that (a slow-loris holding an
// in-flight slot) gets 408 and the connection is closed. The deadline is
// the connection's (HTTP/1.1) or the stream's (HTTP/2) read deadline, set
// for the body only, so it never cuts a watch.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) ([]byte, *corev1.Status) {
	rc := http.NewResponseController(w)
	deadlineSet := rc.SetReadDeadline(time.Now().Add(timeout)) == nil
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if deadlineSet && err == nil {
		// Cleared only after a whole body: after a timeout, the expired
		// deadline makes net/http's discarding of the rest fail at once.
		_ = rc.SetReadDeadline(time.Time{})
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge(limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		return nil, stage.Failure(http.StatusRequestTimeout, "Timeout", "", "",
			"the request body was not received within %s (BodyReadTimeout)", timeout)
	case err != nil:
		return nil, badRequest("read the request body: %v", err)
	}
	return b, nil
}

// decodeObject decodes a request body (JSON or YAML) holding one object of
// res's kind. Unknown and duplicate fields fail the request under Strict
// validation (400, naming the field path); otherwise they are dropped and
// reported as warnings (Warn) or silently (Ignore). The body size was
// bounded by readBody; manifest's limits refuse YAML alias bombs before
// they expand.
func decodeObject(body []byte, res *resource, validation string, maxBytes int) (objects.Object, []string, *corev1.Status) {
	if res.unview != nil { // a view's write: the stored kind's form
		if len(body) > maxBytes {
			return nil, nil, tooLarge(int64(maxBytes))
		}
		b, err := res.unview(body)
		if err != nil {
			return nil, nil, badRequest("%s in version %q cannot be handled as a %s: %v", res.kind, res.version, res.kind, err)
		}
		body, res = b, lookupResource(res.store.APIVersion(), res.store.Resource)
	}
	if res.cr != nil {
		if len(body) > maxBytes {
			return nil, nil, tooLarge(int64(maxBytes))
		}
		return decodeCustomResource(body, res, validation)
	}
	objs, err := manifest.Decode(body, manifest.WithMaxBytes(maxBytes))
	var warnings []string
	if err != nil && validation != validationStrict && kubeType(res) != nil &&
		(errors.Is(err, manifest.ErrUnknownField) || errors.Is(err, manifest.ErrDuplicateField)) &&
		!errors.Is(err, manifest.ErrTooLarge) {
		if validation == validationWarn {
			warnings = fieldWarnings(err)
		}
		obj := kubeType(res)()
		if uerr := yaml.Unmarshal(body, obj); uerr != nil {
			return nil, nil, badRequest("%s in version %q cannot be handled as a %s: %v", res.kind, res.version, res.kind, uerr)
		}
		m, ferr := manifest.FromKube(obj)
		if st := refusedFields(res, ferr); st != nil {
			return nil, nil, st
		}
		if ferr != nil {
			return nil, nil, badRequest("%s in version %q cannot be handled as a %s: %v", res.kind, res.version, res.kind, ferr)
		}
		objs, err = []manifest.Object{{APIVersion: res.groupVersion(), Kind: res.kind, Message: m, Warnings: manifest.PodWarnings(m)}}, nil
	}
	if st := refusedFields(res, err); st != nil {
		return nil, nil, st
	}
	if err != nil {
		switch {
		case errors.Is(err, manifest.ErrTooLarge):
			return nil, nil, tooLarge(int64(maxBytes))
		case errors.Is(err, manifest.ErrUnknownField) || errors.Is(err, manifest.ErrDuplicateField):
			return nil, nil, badRequest("%s in version %q cannot be handled as a %s: strict decoding error: %s",
				res.kind, res.version, res.kind, strings.Join(fieldWarnings(err), ", "))
		}
		return nil, nil, badRequest("%s in version %q cannot be handled as a %s: %v", res.kind, res.version, res.kind, err)
	}
	if len(objs) != 1 {
		return nil, nil, badRequest("the request body must hold exactly one %s, found %d objects", res.kind, len(objs))
	}
	o := objs[0]
	if st := typeMetaMismatch(o.APIVersion, o.Kind, res); st != nil {
		return nil, nil, st
	}
	obj, ok := o.Message.(objects.Object)
	if !ok {
		return nil, nil, badRequest("%s is not a stored kind", res.kind)
	}
	return obj, append(warnings, o.Warnings...), nil
}

// refusedFields is the 422 Invalid for a Pod that sets fields podflow
// refuses (manifest.ErrUnsupportedField, issue 16), naming each path as
// kube-apiserver's validation does; nil for any other error.
func refusedFields(res *resource, err error) *corev1.Status {
	name, errs, ok := manifest.RefusedFields(err)
	if !ok {
		return nil
	}
	return validate.InvalidStatus(res.kind, name, errs)
}

// fieldWarnings words manifest field errors as kube-apiserver does:
// `unknown field "spec.foo"`, `duplicate field "metadata.name"`.
func fieldWarnings(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		var me *manifest.Error
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		if errors.As(err, &me) && me.Field != "" {
			what := "unknown field"
			if errors.Is(me.Err, manifest.ErrDuplicateField) {
				what = "duplicate field"
			}
			out = append(out, fmt.Sprintf("%s %q", what, me.Field))
			return
		}
		out = append(out, err.Error())
	}
	walk(err)
	return out
}

// Patch content types kubectl sends.
const (
	patchStrategic = "application/strategic-merge-patch+json"
	patchMerge     = "application/merge-patch+json"
	patchApply     = "application/apply-patch+yaml"
	patchJSON      = "application/json-patch+json"
)

// MaxJSONPatchOperations bounds the operations of one JSON patch, as
// kube-apiserver's maxJSONPatchOperations: more get 413.
const MaxJSONPatchOperations = 10_000

// patchLimits bound what applying a patch may build.
type patchLimits struct {
	// maxCopyBytes bounds the bytes JSON patch copy operations add, in
	// total (json-patch's AccumulatedCopySizeLimit, kube-apiserver's
	// JSONPatchMaxCopyBytes): a copy bomb doubles the object with each
	// operation, so a few dozen would exhaust the process.
	maxCopyBytes int64
	// maxBytes bounds the patched object, checked before it is decoded.
	maxBytes int64
}

// applyPatch applies a patch to an object's Kubernetes JSON within lim.
// Merge and strategic merge patches cannot build more than the original
// and the patch hold; a JSON patch's copies are bounded by
// lim.maxCopyBytes while it is applied, its operations by
// MaxJSONPatchOperations before.
func applyPatch(original, patch []byte, contentType string, res *resource, lim patchLimits) ([]byte, *corev1.Status) {
	out, st := applyPatchType(original, patch, contentType, res, lim)
	if st == nil && int64(len(out)) > lim.maxBytes {
		return nil, stage.Failure(http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "", "",
			"the patched object is too large: %d bytes (limit %d bytes)", len(out), lim.maxBytes)
	}
	return out, st
}

func applyPatchType(original, patch []byte, contentType string, res *resource, lim patchLimits) ([]byte, *corev1.Status) {
	ct, _, _ := strings.Cut(contentType, ";")
	if res.cr != nil && !slices.Contains(crPatchTypes, strings.TrimSpace(ct)) {
		return nil, unsupportedPatch(crPatchTypes) // a custom resource has no strategic merge patch
	}
	switch strings.TrimSpace(ct) {
	case patchStrategic:
		newT := kubeType(res)
		if newT == nil {
			return nil, stage415(ct, res)
		}
		out, err := strategicpatch.StrategicMergePatch(original, patch, newT())
		if err != nil {
			return nil, badRequest("apply the strategic merge patch: %v", err)
		}
		return out, nil
	case patchMerge, patchApply:
		if ct == patchApply {
			j, err := yaml.YAMLToJSON(patch)
			if err != nil {
				return nil, badRequest("decode the apply patch: %v", err)
			}
			patch = j
		}
		out, err := jsonpatch.MergePatch(original, patch)
		if err != nil {
			return nil, badRequest("apply the merge patch: %v", err)
		}
		return out, nil
	case patchJSON:
		ops, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, invalidPatch(err)
		}
		if len(ops) > MaxJSONPatchOperations {
			return nil, stage.Failure(http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "", "",
				"The allowed maximum operations in a JSON patch is %d, got %d", MaxJSONPatchOperations, len(ops))
		}
		opts := jsonpatch.NewApplyOptions()
		opts.AccumulatedCopySizeLimit = lim.maxCopyBytes
		out, err := ops.ApplyWithOptions(original, opts)
		if err != nil {
			return nil, invalidPatch(err)
		}
		return out, nil
	}
	return nil, stage415(ct, res)
}

func stage415(ct string, res *resource) *corev1.Status {
	return &corev1.Status{Status: "Failure", Code: 415, Reason: "UnsupportedMediaType",
		Message: fmt.Sprintf("the body of the request was in an unknown format (%q) for %s", ct, res.name)}
}

func invalidPatch(err error) *corev1.Status {
	return &corev1.Status{Status: "Failure", Code: 422, Reason: "Invalid", Message: fmt.Sprintf("the patch cannot be applied: %v", err)}
}

// protobufMagic starts every Kubernetes protobuf body (a runtime.Unknown
// envelope), as client-go sends for built-in kinds when asked to.
var protobufMagic = []byte{'k', '8', 's', 0}

// protobufContentType is Kubernetes' protobuf media type.
const protobufContentType = "application/vnd.kubernetes.protobuf"

// bodyJSON turns a protobuf request body into JSON of the same Kubernetes
// object (into holds its Go type); JSON and YAML bodies pass through.
func bodyJSON(r *http.Request, body []byte, into func() runtime.Object) ([]byte, *corev1.Status) {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	if strings.TrimSpace(ct) != protobufContentType {
		return body, nil
	}
	if into == nil {
		return nil, stage415(ct, &resource{name: r.URL.Path})
	}
	if !bytes.HasPrefix(body, protobufMagic) {
		return nil, badRequest("the protobuf body does not start with the Kubernetes magic number")
	}
	var u runtime.Unknown
	if err := u.Unmarshal(body[len(protobufMagic):]); err != nil {
		return nil, badRequest("decode the protobuf envelope: %v", err)
	}
	obj := into()
	pm, ok := obj.(interface{ Unmarshal([]byte) error })
	if !ok {
		return nil, stage415(ct, &resource{name: r.URL.Path})
	}
	if err := pm.Unmarshal(u.Raw); err != nil {
		return nil, badRequest("decode the protobuf object: %v", err)
	}
	var gv, kind string
	if u.APIVersion != "" {
		gv, kind = u.APIVersion, u.Kind
	}
	if tm, ok := obj.(interface{ GetObjectKind() schema.ObjectKind }); ok && gv != "" {
		tm.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(gv, kind))
	}
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, badRequest("re-encode the protobuf object: %v", err)
	}
	return j, nil
}

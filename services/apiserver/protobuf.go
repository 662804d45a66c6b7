package apiserver

// Kubernetes protobuf response bodies (application/vnd.kubernetes.protobuf),
// encoded by apimachinery's protobuf serializer over the Go types of the
// built-in kinds, for clients that prefer them (client-go configured for
// protobuf; the e2e suite's clientset). Request bodies: bodyJSON.

import (
	"bytes"
	"mime"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/podflow/podflow/services/manifest"
)

var protobufSerializer = protobuf.NewSerializer(manifest.Scheme, manifest.Scheme)

// wantsProtobuf reports whether the client prefers Kubernetes protobuf to
// JSON: the first media type of Accept it names that this server answers
// is protobuf (without an "as" parameter: Tables are JSON).
func wantsProtobuf(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(a))
		if err != nil {
			continue
		}
		switch mt {
		case protobufContentType:
			return params["as"] == ""
		case "application/json", "application/yaml", "*/*", "application/*":
			return false
		}
	}
	return false
}

// writeKube writes a Kubernetes object as protobuf when the client
// prefers it and its Go type has a protobuf encoding, else as JSON.
func writeKube(w http.ResponseWriter, r *http.Request, code int, obj runtime.Object) {
	if wantsProtobuf(r) {
		var buf bytes.Buffer
		if err := protobufSerializer.Encode(obj, &buf); err == nil {
			w.Header().Set("Content-Type", protobufContentType)
			w.WriteHeader(code)
			_, _ = w.Write(buf.Bytes())
			return
		}
	}
	writeJSON(w, code, obj)
}

// typedList is the typed list (DeploymentList, ...) of items, for a
// protobuf answer; false when res's kind has no typed list.
func typedList(res *resource, items []kubeItem, lm metav1.ListMeta) (runtime.Object, bool) {
	gvk := res.gvk()
	gvk.Kind += "List"
	list, err := manifest.Scheme.New(gvk)
	if err != nil {
		return nil, false
	}
	objs := make([]runtime.Object, len(items))
	for i, it := range items {
		objs[i] = it.obj
	}
	if err := meta.SetList(list, objs); err != nil {
		return nil, false
	}
	acc, err := meta.ListAccessor(list)
	if err != nil {
		return nil, false
	}
	acc.SetResourceVersion(lm.ResourceVersion)
	acc.SetContinue(lm.Continue)
	acc.SetRemainingItemCount(lm.RemainingItemCount)
	list.GetObjectKind().SetGroupVersionKind(gvk)
	return list, true
}

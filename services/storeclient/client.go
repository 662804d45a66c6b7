package storeclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// host is the made-up address of the in-process API: requests never leave
// the process (the transport answers them).
const host = "http://podflow-store.invalid"

// Clientset returns a kubernetes.Interface whose GETs read store; every
// other verb is refused (405 MethodNotAllowed).
func Clientset(store *objects.Store) (kubernetes.Interface, error) {
	return kubernetes.NewForConfigAndClient(&rest.Config{Host: host, QPS: -1}, &http.Client{Transport: readOnly{store}})
}

// Dynamic returns a dynamic.Interface whose GETs read store; every other
// verb is refused (405 MethodNotAllowed).
func Dynamic(store *objects.Store) (dynamic.Interface, error) {
	return dynamic.NewForConfigAndClient(&rest.Config{Host: host, QPS: -1}, &http.Client{Transport: readOnly{store}})
}

// readOnly answers client-go's GET of one object or a list from the store,
// in the Kubernetes JSON of each object, with kube-apiserver's Status on
// failure.
type readOnly struct{ store *objects.Store }

func (t readOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	if req.Method != http.MethodGet {
		return status(req, apierrors.NewMethodNotSupported(schema.GroupResource{}, req.Method).ErrStatus), nil
	}
	p, ok := parsePath(req.URL.Path)
	if !ok {
		return status(req, apierrors.NewNotFound(schema.GroupResource{}, req.URL.Path).ErrStatus), nil
	}
	kind, ok := kindOfResource(p.gvr)
	if !ok {
		return status(req, apierrors.NewNotFound(p.gvr.GroupResource(), p.name).ErrStatus), nil
	}
	if kind.Namespaced != (p.namespace != "") && p.name != "" {
		return status(req, apierrors.NewNotFound(p.gvr.GroupResource(), p.name).ErrStatus), nil
	}
	ctx := req.Context()
	if p.name != "" {
		kv, err := t.store.KV().Get(ctx, kind.Key(p.namespace, p.name))
		if errors.Is(err, raftstore.ErrNotFound) {
			return status(req, apierrors.NewNotFound(p.gvr.GroupResource(), p.name).ErrStatus), nil
		}
		if err != nil {
			return status(req, apierrors.NewInternalError(err).ErrStatus), nil
		}
		obj, err := decodeKube(kind, kv, false)
		if err != nil {
			return status(req, apierrors.NewInternalError(err).ErrStatus), nil
		}
		return respond(req, http.StatusOK, obj), nil
	}
	kvs, rev, err := t.store.KV().List(ctx, kind.Prefix(p.namespace))
	if err != nil {
		return status(req, apierrors.NewInternalError(err).ErrStatus), nil
	}
	items := make([]json.RawMessage, 0, len(kvs))
	for _, kv := range kvs {
		obj, err := decodeKube(kind, kv, false)
		if err != nil {
			return status(req, apierrors.NewInternalError(err).ErrStatus), nil
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return status(req, apierrors.NewInternalError(err).ErrStatus), nil
		}
		items = append(items, b)
	}
	list := map[string]any{"apiVersion": kind.APIVersion(), "kind": kind.Name + "List",
		"metadata": metav1.ListMeta{ResourceVersion: strconv.FormatInt(rev, 10)}, "items": items}
	return respond(req, http.StatusOK, list), nil
}

// path is a parsed resource path.
type path struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

// parsePath parses /api/v1/[namespaces/NS/]RESOURCE[/NAME] and
// /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME].
func parsePath(p string) (path, bool) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	var out path
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		out.gvr.Version, parts = parts[1], parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		out.gvr.Group, out.gvr.Version, parts = parts[1], parts[2], parts[3:]
	default:
		return path{}, false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		out.namespace, parts = parts[1], parts[2:]
	}
	switch len(parts) {
	case 1:
		out.gvr.Resource = parts[0]
	case 2:
		out.gvr.Resource, out.name = parts[0], parts[1]
	default:
		return path{}, false
	}
	return out, true
}

func status(req *http.Request, st metav1.Status) *http.Response {
	st.APIVersion, st.Kind = "v1", "Status"
	return respond(req, int(st.Code), &st)
}

func respond(req *http.Request, code int, body any) *http.Response {
	b, err := json.Marshal(body)
	if err != nil {
		code, b = http.StatusInternalServerError, fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Status","status":"Failure","code":500,"message":%q}`, err.Error())
	}
	return &http.Response{
		StatusCode: code, Status: strconv.Itoa(code) + " " + http.StatusText(code), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": []string{"application/json"}},
		Body:    io.NopCloser(bytes.NewReader(b)),
		Request: req, ContentLength: int64(len(b)),
	}
}

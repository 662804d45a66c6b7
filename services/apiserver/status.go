package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/stage"
)

// versionInfo is what /version answers: the Kubernetes minor version whose
// API podflow speaks.
var versionInfo = &version.Info{
	Major: "1", Minor: "32", GitVersion: "v1.32.0-podflow", Platform: runtime.GOOS + "/" + runtime.GOARCH,
	GoVersion: runtime.Version(), Compiler: runtime.Compiler,
}

// KubernetesVersion is the Kubernetes version podflow's API answers on
// /version (GitVersion).
func KubernetesVersion() string { return versionInfo.GitVersion }

func apiVersions(r *http.Request) *metav1.APIVersions {
	return &metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host},
		},
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeStatus(w, stage.Internal(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// kubeStatus converts podflow's Status to meta/v1 Status.
func kubeStatus(st *corev1.Status) *metav1.Status {
	out := &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   st.GetStatus(),
		Message:  st.GetMessage(),
		Reason:   metav1.StatusReason(st.GetReason()),
		Code:     st.GetCode(),
	}
	if out.Status == "" {
		out.Status = metav1.StatusFailure
	}
	if st.GetName() != "" || st.GetKind() != "" || len(st.GetCauses()) > 0 {
		out.Details = &metav1.StatusDetails{Name: st.GetName(), Kind: st.GetKind()}
		for _, c := range st.GetCauses() {
			out.Details.Causes = append(out.Details.Causes, metav1.StatusCause{
				Type: metav1.CauseType(c.GetType()), Message: c.GetMessage(), Field: c.GetField()})
		}
	}
	return out
}

func writeStatus(w http.ResponseWriter, st *corev1.Status) {
	code := int(st.GetCode())
	if code < 100 || code > 599 {
		code = http.StatusInternalServerError
	}
	if code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, kubeStatus(st))
}

func notFoundPath(path string) *corev1.Status {
	return stage.Failure(404, eventsv1.ReasonNotFound, "", "", "the server could not find the requested resource (%s)", path)
}

func methodNotAllowed(method, path string) *corev1.Status {
	return stage.Failure(405, "MethodNotAllowed", "", "", "the server does not allow this method on the requested resource (%s %s)", method, path)
}

func badRequest(format string, args ...any) *corev1.Status {
	return stage.Failure(400, eventsv1.ReasonBadRequest, "", "", format, args...)
}

func invalid(kind, name string, causes []*corev1.StatusCause, format string, args ...any) *corev1.Status {
	st := stage.Failure(422, eventsv1.ReasonInvalid, kind, name, format, args...)
	st.Causes = causes
	return st
}

func conflict(resource, name string) *corev1.Status {
	return stage.Failure(409, eventsv1.ReasonConflict, resource, name,
		"Operation cannot be fulfilled on %s %q: the object has been modified; please apply your changes to the latest version and try again", resource, name)
}

func tooLarge(limit int64) *corev1.Status {
	return stage.Failure(413, "RequestEntityTooLarge", "", "", "the request body is too large (limit %d bytes)", limit)
}

// tooLargeResourceVersion is kube-apiserver's answer to a request for a
// revision the store has not reached (storage.NewTooLargeResourceVersionError):
// 504 Timeout, retry after a second.
func tooLargeResourceVersion(rev, current int64) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  fmt.Sprintf("Too large resource version: %d, current: %d", rev, current),
		Reason:   metav1.StatusReasonTimeout,
		Code:     http.StatusGatewayTimeout,
		Details: &metav1.StatusDetails{
			Causes:            []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}},
			RetryAfterSeconds: 1,
		},
	}
}

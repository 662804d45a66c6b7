package apiserver

// The Eviction subresource: `kubectl drain` POSTs a policy/v1 (or
// v1beta1) Eviction to /api/v1/namespaces/<ns>/pods/<name>/eviction (verb
// create, subresource eviction). The front door decodes and checks the
// Eviction as kube-apiserver's EvictionREST.Create does (the name in the
// URL and the body agree, deleteOptions.ignoreStoreReadErrorWithClusterBreakingPotential
// is refused, the request's dryRun and the body's agree) and hands it to
// the Backend's Evicter (the api stage: services/stages/api eviction.go),
// which checks the pod's PodDisruptionBudget and deletes the pod. Its
// answer is kube's: 201 Success, or the Status kube-apiserver gives (429
// TooManyRequests with a DisruptionBudget cause when a budget refuses).

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/stage"
)

// Evicter is the optional Backend capability behind pods/eviction: it
// evicts pod namespace/name for user (authorized already) with opts, and
// returns nil on success, else the error to answer (a
// *apierrors.StatusError is written as it is).
type Evicter interface {
	Evict(ctx context.Context, user *corev1.UserInfo, namespace, name string, opts *metav1.DeleteOptions) error
}

var _ Evicter = frontBackend{}

// Evict implements Evicter when the stage does (404 otherwise, as a
// server without the subresource answers).
func (b frontBackend) Evict(ctx context.Context, user *corev1.UserInfo, namespace, name string, opts *metav1.DeleteOptions) error {
	e, ok := b.Backend.(Evicter)
	if !ok {
		return apierrors.NewNotFound(policyv1.Resource("evictions"), name)
	}
	return e.Evict(ctx, user, namespace, name, opts)
}

// isEviction reports whether req is on a pod's eviction subresource.
func isEviction(req *request) bool {
	return req.res.name == "pods" && req.res.group == "" && req.sub == "eviction"
}

// authorizedEviction authorizes create on pods/eviction, as kube-apiserver's
// RBAC checks it, and serves the eviction.
func (s *Server) authorizedEviction(w http.ResponseWriter, r *http.Request, req *request) {
	if req.verb != "create" || req.name == "" {
		writeStatus(w, methodNotAllowed(r.Method, r.URL.Path))
		return
	}
	attrs := auth.Attributes{User: req.user, Verb: "create", Namespace: req.namespace, APIGroup: "",
		Resource: "pods", Subresource: "eviction", Name: req.name}
	if d := s.backend.Authorize(attrs); !d.Allowed {
		writeStatus(w, auth.Forbidden(attrs, ""))
		return
	}
	evicter, ok := s.backend.(Evicter)
	if !ok {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	dry, st := dryRun(r)
	var body []byte
	if st == nil {
		body, st = readBody(w, r, s.cfg.MaxBodyBytes, s.cfg.BodyReadTimeout)
	}
	if st == nil {
		body, st = bodyJSON(r, body, func() runtime.Object { return &policyv1.Eviction{} })
	}
	if st != nil {
		writeStatus(w, st)
		return
	}
	var ev policyv1.Eviction
	if err := json.Unmarshal(body, &ev); err != nil {
		writeStatus(w, badRequest("decode Eviction: %v", err))
		return
	}
	switch {
	case ev.APIVersion != "" && ev.APIVersion != "policy/v1" && ev.APIVersion != "policy/v1beta1":
		writeStatus(w, badRequest("%s is not a supported Eviction version: use policy/v1 or policy/v1beta1", ev.APIVersion))
		return
	case ev.Kind != "" && ev.Kind != "Eviction":
		writeStatus(w, badRequest("not a Eviction object: %s", ev.Kind))
		return
	case ev.Name != req.name:
		writeStatus(w, badRequest("name in URL does not match name in Eviction object"))
		return
	case ev.DeleteOptions != nil && ev.DeleteOptions.IgnoreStoreReadErrorWithClusterBreakingPotential != nil &&
		*ev.DeleteOptions.IgnoreStoreReadErrorWithClusterBreakingPotential:
		writeStatus(w, invalid("Eviction", req.name, []*corev1.StatusCause{{Type: "FieldValueInvalid",
			Field:   "deleteOptions.ignoreStoreReadErrorWithClusterBreakingPotential",
			Message: "Invalid value: true: can not be set for pod eviction, try after removing the option"}},
			"Eviction.policy %q is invalid: deleteOptions.ignoreStoreReadErrorWithClusterBreakingPotential: Invalid value: true: can not be set for pod eviction, try after removing the option", req.name))
		return
	}
	var reqDry []string
	if dry {
		reqDry = []string{metav1.DryRunAll}
	}
	opts, err := propagateDryRun(&ev, reqDry)
	if err != nil {
		writeStatus(w, badRequest("%v", err))
		return
	}
	for _, d := range opts.DryRun {
		if d != metav1.DryRunAll {
			writeStatus(w, badRequest("dryRun %q is not supported: use All", d))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	err = evicter.Evict(ctx, req.user, req.namespace, req.name, opts)
	var se *apierrors.StatusError
	switch {
	case err == nil:
		writeJSON(w, http.StatusCreated, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusSuccess, Code: http.StatusCreated})
	case errors.As(err, &se):
		k := se.ErrStatus
		k.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		if k.Details != nil && k.Details.RetryAfterSeconds > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(k.Details.RetryAfterSeconds)))
		}
		code := int(k.Code)
		if code < 100 || code > 599 {
			code = http.StatusInternalServerError
		}
		writeJSON(w, code, &k)
	case errors.Is(err, context.DeadlineExceeded):
		writeStatus(w, stage.Failure(504, "Timeout", "pods", req.name, "the server was unable to return a response in the time allotted"))
	default:
		writeStatus(w, stage.Internal(err))
	}
}

// propagateDryRun is kube's: the request's dryRun and the Eviction's
// deleteOptions.dryRun must agree; the one set wins.
func propagateDryRun(ev *policyv1.Eviction, dry []string) (*metav1.DeleteOptions, error) {
	if ev.DeleteOptions == nil {
		return &metav1.DeleteOptions{DryRun: dry}, nil
	}
	if len(ev.DeleteOptions.DryRun) == 0 {
		ev.DeleteOptions.DryRun = dry
		return ev.DeleteOptions, nil
	}
	if len(dry) == 0 {
		return ev.DeleteOptions, nil
	}
	if !reflect.DeepEqual(dry, ev.DeleteOptions.DryRun) {
		return nil, errors.New("Non-matching dry-run options in request and content: " + strings.Join(dry, ",") + " and " + strings.Join(ev.DeleteOptions.DryRun, ","))
	}
	return ev.DeleteOptions, nil
}

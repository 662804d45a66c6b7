package apiserver

// The TokenRequest API: `kubectl create token SA` POSTs an
// authentication.k8s.io/v1 TokenRequest to
// /api/v1/namespaces/<ns>/serviceaccounts/<name>/token (verb create,
// subresource token) and gets a bound token for the ServiceAccount's
// current uid, as kube-apiserver does. A spec.boundObjectRef to a Pod
// (running as that ServiceAccount) or a Secret of the namespace binds the
// token to that object's uid too: it authenticates only while the object
// exists with it (auth.TokenAuthenticator). As kube-apiserver's
// TokenREST: a missing object is 404, another kind 400, a pod of
// another ServiceAccount 400, a uid that is not the object's 409.

import (
	"context"
	"errors"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// ErrNoTokenIssuer is returned by a TokenIssuer that has no signing key.
var ErrNoTokenIssuer = errors.New("apiserver: no ServiceAccount token signing key")

// TokenIssuer is the optional Backend capability behind the TokenRequest
// API: it signs a bound token for a ServiceAccount of uid, bound to obj
// (the zero auth.BoundObject: to nothing else).
type TokenIssuer interface {
	IssueServiceAccountToken(namespace, name, uid string, obj auth.BoundObject, audiences []string, expiration time.Duration) (string, time.Time, error)
}

// isTokenRequest reports whether req is a TokenRequest (create of
// serviceaccounts/token).
func isTokenRequest(req *request) bool {
	return req.res.name == "serviceaccounts" && req.res.group == "" && req.sub == "token" && req.verb == "create" && req.name != ""
}

// authorizedTokenRequest authorizes a TokenRequest (create on
// serviceaccounts/token, as kube-apiserver's RBAC checks it) and serves it.
func (s *Server) authorizedTokenRequest(w http.ResponseWriter, r *http.Request, req *request) {
	attrs := auth.Attributes{User: req.user, Verb: "create", Namespace: req.namespace, APIGroup: "",
		Resource: "serviceaccounts", Subresource: "token", Name: req.name}
	if d := s.backend.Authorize(attrs); !d.Allowed {
		writeStatus(w, auth.Forbidden(attrs, ""))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	s.tokenRequest(ctx, w, r, req)
}

// tokenRequest serves a TokenRequest once it is authorized.
func (s *Server) tokenRequest(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	issuer, ok := s.backend.(TokenIssuer)
	if !ok {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	var tr authenticationv1.TokenRequest
	if !s.decodeReview(w, r, &tr, "TokenRequest") {
		return
	}
	var exp time.Duration
	if e := tr.Spec.ExpirationSeconds; e != nil {
		if why := auth.CheckTokenExpiration(*e); why != "" {
			writeStatus(w, invalid("TokenRequest", req.name, []*corev1.StatusCause{{Type: "FieldValueInvalid", Field: "spec.expirationSeconds",
				Message: "Invalid value: " + why}},
				"TokenRequest.authentication.k8s.io %q is invalid: spec.expirationSeconds: Invalid value: %s", req.name, why))
			return
		}
		exp = time.Duration(*e) * time.Second
	}
	obj, st := s.read(ctx, req.res, req.namespace, req.name)
	if st != nil {
		writeStatus(w, st)
		return
	}
	sa, ok := obj.(*corev1.ServiceAccount)
	if !ok || sa.GetMetadata().GetUid() == "" {
		writeStatus(w, stage.Internal(errors.New("apiserver: stored ServiceAccount without a uid")))
		return
	}
	var bound auth.BoundObject
	if ref := tr.Spec.BoundObjectRef; ref != nil {
		if bound, st = s.boundObject(ctx, req, ref); st != nil {
			writeStatus(w, st)
			return
		}
	}
	token, expiry, err := issuer.IssueServiceAccountToken(req.namespace, req.name, sa.GetMetadata().GetUid(), bound, tr.Spec.Audiences, exp)
	if errors.Is(err, ErrNoTokenIssuer) {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	if err != nil {
		writeStatus(w, stage.Internal(err))
		return
	}
	tr.TypeMeta = metav1.TypeMeta{Kind: "TokenRequest", APIVersion: "authentication.k8s.io/v1"}
	tr.ObjectMeta = metav1.ObjectMeta{Name: req.name, Namespace: req.namespace, CreationTimestamp: metav1.Now()}
	secs := int64(expiry.Sub(time.Now()).Round(time.Second) / time.Second)
	tr.Spec.ExpirationSeconds = &secs
	tr.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(expiry)}
	writeJSON(w, http.StatusCreated, &tr)
}

// boundObject reads the object a TokenRequest binds its token to (in the
// ServiceAccount's namespace) and checks it as kube-apiserver does.
func (s *Server) boundObject(ctx context.Context, req *request, ref *authenticationv1.BoundObjectReference) (auth.BoundObject, *corev1.Status) {
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	if gvk.Group != "" || (gvk.Kind != auth.BoundKindPod && gvk.Kind != auth.BoundKindSecret) {
		return auth.BoundObject{}, badRequest("cannot bind token to object of type %s", gvk.String())
	}
	res := lookupResource("v1", "secrets")
	if gvk.Kind == auth.BoundKindPod {
		res = lookupResource("v1", "pods")
	}
	obj, st := s.read(ctx, res, req.namespace, ref.Name)
	if st != nil {
		return auth.BoundObject{}, st
	}
	if p, ok := obj.(*corev1.Pod); ok {
		if sa := PodServiceAccount(p); sa != req.name {
			return auth.BoundObject{}, badRequest("cannot bind token for serviceaccount %q to pod running with serviceaccount %q", req.name, sa)
		}
	}
	uid := objects.Meta(obj).GetUid()
	if ref.UID != "" && string(ref.UID) != uid {
		return auth.BoundObject{}, stage.Failure(409, eventsv1.ReasonConflict, gvk.Kind, ref.Name,
			"Operation cannot be fulfilled on %s %q: the UID in the bound object reference (%s) does not match the UID in record (%s). The object might have been deleted and then recreated",
			gvk.Kind, ref.Name, ref.UID, uid)
	}
	bound := auth.BoundObject{Kind: gvk.Kind, Name: ref.Name, UID: uid}
	// A pod's token names the pod's node too (kube-apiserver's
	// ServiceAccountTokenPodNodeInfo): its uid when the Node is stored,
	// its name alone when not.
	if p, ok := obj.(*corev1.Pod); ok && p.GetSpec().GetNodeName() != "" {
		bound.NodeName = p.GetSpec().GetNodeName()
		node, st := s.read(ctx, lookupResource("v1", "nodes"), "", bound.NodeName)
		switch {
		case st != nil && st.GetCode() == http.StatusNotFound:
		case st != nil:
			return auth.BoundObject{}, st
		default:
			bound.NodeUID = objects.Meta(node).GetUid()
		}
	}
	return bound, nil
}

// PodServiceAccount is the ServiceAccount pod runs as: its
// serviceAccountName, "default" when it names none (what Kubernetes'
// ServiceAccount admission sets).
func PodServiceAccount(p *corev1.Pod) string {
	if sa := p.GetSpec().GetServiceAccountName(); sa != "" {
		return sa
	}
	return "default"
}

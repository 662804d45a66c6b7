package apiserver

// TokenReview (authentication.k8s.io/v1) and SubjectAccessReview,
// LocalSubjectAccessReview (authorization.k8s.io/v1): a webhook or an
// aggregated server asks who a token is and whether a user may do
// something. Creating them needs create on tokenreviews,
// subjectaccessreviews or localsubjectaccessreviews (RBAC, checked before
// the handlers run, as kube-apiserver's authorization filter); the answers
// are kube-apiserver's (pkg/registry/authentication/tokenreview,
// pkg/registry/authorization/*subjectaccessreview), validation messages
// included.

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
)

// ErrNoTokenReviewer is returned when the backend cannot review tokens.
var ErrNoTokenReviewer = errors.New("apiserver: the backend does not review tokens")

// TokenReviewer is the optional Backend capability behind TokenReview: it
// authenticates a token for audiences (none: the server's own) as
// auth.TokenAuthenticator.ReviewToken.
type TokenReviewer interface {
	ReviewToken(token string, audiences []string) (auth.TokenReviewResult, bool, error)
}

// writeKubeError writes an apimachinery StatusError as kube-apiserver
// does.
func writeKubeError(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.ErrStatus
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	writeJSON(w, int(st.Code), &st)
}

// tokenReview answers a TokenReview: status.authenticated, the user
// (name, uid, groups, extra) and the audiences the token is valid for, or
// status.error.
func (s *Server) tokenReview(w http.ResponseWriter, r *http.Request, req *request) {
	var review authenticationv1.TokenReview
	if !s.decodeReview(w, r, &review, "TokenReview") {
		return
	}
	if req.namespace != "" {
		writeKubeError(w, apierrors.NewBadRequest(fmt.Sprintf("namespace is not allowed on this type: %v", req.namespace)))
		return
	}
	if review.Spec.Token == "" {
		writeKubeError(w, apierrors.NewBadRequest("token is required for TokenReview in authentication"))
		return
	}
	review.APIVersion, review.Kind = "authentication.k8s.io/v1", "TokenReview"
	tr, ok := s.backend.(TokenReviewer)
	if !ok {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	res, authenticated, err := tr.ReviewToken(review.Spec.Token, review.Spec.Audiences)
	review.Status = authenticationv1.TokenReviewStatus{Authenticated: authenticated}
	if err != nil {
		review.Status.Error = err.Error()
	}
	if authenticated && res.User != nil {
		u := authenticationv1.UserInfo{Username: res.User.GetUsername(), UID: res.User.GetUid(), Groups: res.User.GetGroups(),
			Extra: map[string]authenticationv1.ExtraValue{}}
		for k, v := range res.Extra {
			u.Extra[k] = authenticationv1.ExtraValue(v)
		}
		review.Status.User, review.Status.Audiences = u, res.Audiences
	}
	writeJSON(w, http.StatusCreated, &review)
}

// subjectAccessReview answers a SubjectAccessReview (cluster-wide) or a
// LocalSubjectAccessReview (of the URL's namespace): whether spec.user
// with spec.groups may do what spec.resourceAttributes or
// spec.nonResourceAttributes say, with RBAC's reason, and the
// evaluationError of selectors that do not parse.
func (s *Server) subjectAccessReview(w http.ResponseWriter, r *http.Request, req *request) {
	local := req.res.kind == "LocalSubjectAccessReview"
	var spec *authorizationv1.SubjectAccessReviewSpec
	var meta *metav1.ObjectMeta
	var out interface {
		SetStatus(authorizationv1.SubjectAccessReviewStatus)
	}
	if local {
		review := &localSAR{}
		if !s.decodeReview(w, r, &review.LocalSubjectAccessReview, req.res.kind) {
			return
		}
		review.APIVersion, review.Kind = "authorization.k8s.io/v1", req.res.kind
		spec, meta, out = &review.Spec, &review.ObjectMeta, review
	} else {
		review := &clusterSAR{}
		if !s.decodeReview(w, r, &review.SubjectAccessReview, req.res.kind) {
			return
		}
		review.APIVersion, review.Kind = "authorization.k8s.io/v1", req.res.kind
		spec, meta, out = &review.Spec, &review.ObjectMeta, review
	}
	if local { // the create handler's EnsureObjectNamespaceMatchesRequestNamespace
		if meta.Namespace == "" {
			meta.Namespace = req.namespace
		} else if meta.Namespace != req.namespace {
			writeKubeError(w, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request"))
			return
		}
	}
	errs := validateSARSpec(*spec, field.NewPath("spec"))
	m := *meta
	m.ManagedFields = nil
	if local {
		m.Namespace = ""
		if !apiequality.Semantic.DeepEqual(metav1.ObjectMeta{}, m) {
			errs = append(errs, field.Invalid(field.NewPath("metadata"), *meta, `must be empty except for namespace`))
		}
		if ra := spec.ResourceAttributes; ra != nil && ra.Namespace != meta.Namespace {
			errs = append(errs, field.Invalid(field.NewPath("spec.resourceAttributes.namespace"), ra.Namespace, `must match metadata.namespace`))
		}
		if spec.NonResourceAttributes != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec.nonResourceAttributes"), spec.NonResourceAttributes, `disallowed on this kind of request`))
		}
	} else if !apiequality.Semantic.DeepEqual(metav1.ObjectMeta{}, m) {
		errs = append(errs, field.Invalid(field.NewPath("metadata"), *meta, `must be empty`))
	}
	if len(errs) > 0 {
		writeKubeError(w, apierrors.NewInvalid(schema.GroupKind{Group: "authorization.k8s.io", Kind: req.res.kind}, "", errs))
		return
	}
	user := &corev1.UserInfo{Username: spec.User, Uid: spec.UID, Groups: spec.Groups}
	var status authorizationv1.SubjectAccessReviewStatus
	if ra := spec.ResourceAttributes; ra != nil {
		d := s.backend.Authorize(auth.Attributes{User: user, Verb: ra.Verb, Namespace: ra.Namespace, APIGroup: ra.Group,
			Resource: ra.Resource, Subresource: ra.Subresource, Name: ra.Name})
		status = authorizationv1.SubjectAccessReviewStatus{Allowed: d.Allowed, Reason: d.Reason, EvaluationError: selectorErrors(ra)}
	} else {
		status = nonResourceDecision(user, spec.NonResourceAttributes, s.backend)
	}
	out.SetStatus(status)
	writeJSON(w, http.StatusCreated, out)
}

type localSAR struct {
	authorizationv1.LocalSubjectAccessReview `json:",inline"`
}

func (l *localSAR) SetStatus(st authorizationv1.SubjectAccessReviewStatus) { l.Status = st }

type clusterSAR struct {
	authorizationv1.SubjectAccessReview `json:",inline"`
}

func (c *clusterSAR) SetStatus(st authorizationv1.SubjectAccessReviewStatus) { c.Status = st }

// nonResourceDecision decides a non-resource request (/healthz,
// /version, /api …): RBAC's nonResourceURLs are not modelled, so a GET is
// allowed to every authenticated user (the bootstrap roles
// system:discovery and system:public-info-viewer grant those to
// system:authenticated) and anything is to a superuser.
func nonResourceDecision(user *corev1.UserInfo, nra *authorizationv1.NonResourceAttributes, b Backend) authorizationv1.SubjectAccessReviewStatus {
	if d := b.Authorize(auth.Attributes{User: user, Verb: nra.Verb, Resource: "*", APIGroup: "*"}); d.Allowed {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: d.Reason}
	}
	if nra.Verb == "get" && slices.Contains(user.GetGroups(), auth.GroupAuthenticated) {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true,
			Reason: "podflow allows GET of non-resource URLs to every authenticated user"}
	}
	return authorizationv1.SubjectAccessReviewStatus{}
}

// validateSARSpec is kube's ValidateSubjectAccessReviewSpec.
func validateSARSpec(spec authorizationv1.SubjectAccessReviewSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if (spec.ResourceAttributes != nil) == (spec.NonResourceAttributes != nil) {
		errs = append(errs, field.Invalid(p, spec.NonResourceAttributes, `exactly one of nonResourceAttributes or resourceAttributes must be specified`))
	}
	if spec.User == "" && len(spec.Groups) == 0 {
		errs = append(errs, field.Invalid(p.Child("user"), spec.User, `at least one of user or group must be specified`))
	}
	if ra := spec.ResourceAttributes; ra != nil {
		rp := field.NewPath("spec.resourceAttributes")
		if fs := ra.FieldSelector; fs != nil {
			fp := rp.Child("fieldSelector")
			errs = append(errs, selectorShape(fs.RawSelector, len(fs.Requirements), fp)...)
			for i, req := range fs.Requirements {
				errs = append(errs, metav1validation.ValidateFieldSelectorRequirement(req,
					metav1validation.FieldSelectorValidationOptions{AllowUnknownOperatorInRequirement: true}, fp.Child("requirements").Index(i))...)
			}
		}
		if ls := ra.LabelSelector; ls != nil {
			lp := rp.Child("labelSelector")
			errs = append(errs, selectorShape(ls.RawSelector, len(ls.Requirements), lp)...)
			for i, req := range ls.Requirements {
				errs = append(errs, metav1validation.ValidateLabelSelectorRequirement(req,
					metav1validation.LabelSelectorValidationOptions{AllowUnknownOperatorInRequirement: true}, lp.Child("requirements").Index(i))...)
			}
		}
	}
	return errs
}

func selectorShape(raw string, requirements int, p *field.Path) field.ErrorList {
	switch {
	case raw != "" && requirements > 0:
		return field.ErrorList{field.Invalid(p.Child("rawSelector"), raw, "may not specified at the same time as requirements")}
	case raw == "" && requirements == 0:
		return field.ErrorList{field.Required(p.Child("requirements"), fmt.Sprintf("when %s is specified, requirements or rawSelector is required", p))}
	}
	return nil
}

// selectorErrors is kube's BuildEvaluationError for selectors that do not
// parse (the authorizer itself reports none): they are ignored, wholly or
// in part.
func selectorErrors(ra *authorizationv1.ResourceAttributes) string {
	var out []string
	if fs := ra.FieldSelector; fs != nil {
		n, bad := 0, false
		if fs.RawSelector != "" {
			if sel, err := fields.ParseSelector(fs.RawSelector); err != nil {
				bad = true
			} else {
				n = len(sel.Requirements())
			}
		}
		for _, req := range fs.Requirements {
			switch {
			case len(req.Values) > 1, req.Operator == metav1.FieldSelectorOpExists, req.Operator == metav1.FieldSelectorOpDoesNotExist:
				bad = true
			case (req.Operator == metav1.FieldSelectorOpIn || req.Operator == metav1.FieldSelectorOpNotIn) && len(req.Values) == 1:
				n++
			default:
				bad = true
			}
		}
		if bad {
			out = append(out, ignored("fieldSelector", n))
		}
	}
	if ls := ra.LabelSelector; ls != nil {
		n, bad := 0, false
		if ls.RawSelector != "" {
			if sel, err := labels.Parse(ls.RawSelector); err != nil {
				bad = true
			} else {
				reqs, _ := sel.Requirements()
				n = len(reqs)
			}
		}
		if len(ls.Requirements) > 0 {
			n = 0
			for _, req := range ls.Requirements {
				if _, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req}}); err != nil {
					bad = true
				} else {
					n++
				}
			}
		}
		if bad {
			out = append(out, ignored("labelSelector", n))
		}
	}
	switch len(out) {
	case 0:
		return ""
	case 1:
		return out[0]
	}
	return out[0] + "; " + out[1]
}

func ignored(what string, kept int) string {
	if kept > 0 {
		return "spec.resourceAttributes." + what + " partially ignored due to parse error"
	}
	return "spec.resourceAttributes." + what + " ignored due to parse error"
}

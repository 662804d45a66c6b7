package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apipath "k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/validate"
)

func (s *Server) serveResource(w http.ResponseWriter, r *http.Request, req *request) {
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet:
		switch {
		case req.name == "" && queryBool(q, "watch"):
			req.verb = "watch"
		case req.name == "":
			req.verb = "list"
		default:
			req.verb = "get"
		}
	case http.MethodPost:
		req.verb = "create"
	case http.MethodPut:
		req.verb = "update"
	case http.MethodPatch:
		req.verb = "patch"
	case http.MethodDelete:
		req.verb = "delete"
		if req.name == "" {
			req.verb = "deletecollection"
		}
	default:
		writeStatus(w, methodNotAllowed(r.Method, r.URL.Path))
		return
	}
	if s.serveStream(w, r, req) { // pods/exec, pods/attach (exec.go)
		return
	}
	if isEphemeral(req) { // pods/ephemeralcontainers: ephemeral.go
		s.serveEphemeral(w, r, req)
		return
	}
	if isTokenRequest(req) { // serviceaccounts/token: tokenrequest.go
		s.authorizedTokenRequest(w, r, req)
		return
	}
	if isEviction(req) { // pods/eviction: eviction.go
		s.authorizedEviction(w, r, req)
		return
	}
	if req.res.name == "namespaces" && req.res.group == "" && req.sub == "finalize" && req.verb != "update" {
		writeStatus(w, methodNotAllowed(r.Method, r.URL.Path)) // finalize is PUT only
		return
	}
	switch {
	case req.sub == "" || (req.res.name == "pods" && req.res.group == "" && (req.sub == "status" || req.sub == "log") && req.verb == "get"),
		isPodStatusWrite(req),     // podstatus.go
		namespaceSubresource(req), // nssubresources.go
		serviceStatusRequest(req), // servicestatus.go
		nodeStatusRequest(req):    // nodestatus.go
	case req.res.cr != nil:
		// A custom resource version's own subresources.
		if !((req.sub == "status" && req.res.cr.HasStatus()) || (req.sub == "scale" && req.res.cr.HasScale())) ||
			(req.verb != "get" && req.verb != "update" && req.verb != "patch") {
			writeStatus(w, notFoundPath(r.URL.Path))
			return
		}
	case req.res.generic() && req.res.store.HasSubresource(req.sub) && (req.verb == "get" || req.verb == "update" || req.verb == "patch"):
		// A generic kind's status, scale, approval.
	default:
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	if req.res.metrics {
		s.serveMetrics(w, r, req)
		return
	}
	if req.res.cr != nil && req.res.cr.Warning != "" {
		writeWarnings(w, []string{req.res.cr.Warning}) // a deprecated version
	}
	needsName := req.verb != "create" && req.verb != "list" && req.verb != "watch" && req.verb != "deletecollection"
	if needsName != (req.name != "") || (req.res.readOnly && req.res.unview == nil && req.verb != "get" && req.verb != "list" && req.verb != "watch") ||
		(req.res.store.Name == "" && req.verb != "create") {
		writeStatus(w, methodNotAllowed(r.Method, r.URL.Path))
		return
	}
	virtual := req.res.store.Name == "" && !req.res.metrics // the reviews: no table convertor
	switch req.res.kind {
	case "SelfSubjectAccessReview", "SelfSubjectRulesReview", "SelfSubjectReview":
		if st := notAcceptableTable(r); virtual && st != nil { // kube-apiserver's negotiation, before the body is read
			writeStatus(w, st)
			return
		}
	}
	switch req.res.kind {
	case "SelfSubjectAccessReview":
		s.selfSubjectAccessReview(w, r, req)
		return
	case "SelfSubjectRulesReview":
		s.selfSubjectRulesReview(w, r, req)
		return
	case "SelfSubjectReview": // kubectl auth whoami
		writeJSON(w, http.StatusCreated, &authenticationv1.SelfSubjectReview{
			TypeMeta: metav1.TypeMeta{Kind: "SelfSubjectReview", APIVersion: "authentication.k8s.io/v1"},
			Status: authenticationv1.SelfSubjectReviewStatus{UserInfo: authenticationv1.UserInfo{
				Username: req.user.GetUsername(), UID: req.user.GetUid(), Groups: req.user.GetGroups()}},
		})
		return
	}
	if req.res.namespaced && req.namespace == "" && req.verb == "create" {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	attrs := auth.Attributes{User: req.user, Verb: req.verb, Namespace: req.namespace, APIGroup: req.res.group,
		Resource: req.res.name, Subresource: req.sub, Name: selectedName(req, q)}
	if d := s.backend.Authorize(attrs); !d.Allowed {
		writeStatus(w, auth.Forbidden(attrs, ""))
		return
	}
	if st := notAcceptableTable(r); virtual && st != nil {
		writeStatus(w, st)
		return
	}
	switch req.res.kind { // reviews.go
	case "TokenReview":
		s.tokenReview(w, r, req)
		return
	case "SubjectAccessReview", "LocalSubjectAccessReview":
		s.subjectAccessReview(w, r, req)
		return
	}
	if req.verb == "watch" {
		s.watch(w, r, req)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	if req.sub == "scale" {
		s.serveScale(ctx, w, r, req)
		return
	}
	switch req.verb {
	case "get":
		s.get(ctx, w, r, req)
	case "list":
		s.list(ctx, w, r, req)
	case "create":
		s.create(ctx, w, r, req)
	case "update", "patch":
		s.update(ctx, w, r, req)
	case "delete":
		s.delete(ctx, w, r, req)
	case "deletecollection":
		s.deleteCollection(ctx, w, r, req)
	}
}

// storeStatus maps a store error to a Status.
func storeStatus(err error, res *resource, name string) *corev1.Status {
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		return stage.NotFound(res.name, name)
	case errors.Is(err, raftstore.ErrAlreadyExists):
		return stage.AlreadyExists(res.name, name)
	case errors.Is(err, raftstore.ErrConflict):
		return conflict(res.name, name)
	case errors.Is(err, context.DeadlineExceeded):
		return stage.Failure(504, "Timeout", res.name, name, "the server was unable to return a response in the time allotted")
	case stage.Transient(err):
		return stage.Failure(503, "ServiceUnavailable", res.name, name, "the store is unavailable: %v", err)
	}
	return stage.Internal(err)
}

func (s *Server) read(ctx context.Context, res *resource, ns, name string, opts ...raftstore.ReadOption) (objects.Object, *corev1.Status) {
	kv, err := s.store.KV().Get(ctx, res.store.Key(ns, name), opts...)
	if err != nil {
		return nil, storeStatus(err, res, name)
	}
	obj := res.store.New()
	if err := objects.Decode(kv, obj); err != nil {
		return nil, stage.Internal(err)
	}
	return obj, nil
}

// get reads one object: the latest without a resourceVersion or with "0"
// ("any, the newest preferred": a client that reads with "0" right after
// its own write expects that write, as kube-apiserver's watch cache gives
// it in practice, and one object's read is cheap; a follower's local state
// may be behind it), one not older than a given revision otherwise
// (waiting for the store to reach it, as a watch does).
func (s *Server) get(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	var atLeast int64
	switch rv := r.URL.Query().Get("resourceVersion"); rv {
	case "", "0":
	default:
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || n < 0 {
			writeStatus(w, badRequest("resourceVersion %q is not a valid revision", rv))
			return
		}
		atLeast = n
	}
	obj, st := s.read(ctx, req.res, req.namespace, req.name)
	var rev int64
	if st == nil {
		rev = objects.Revision(obj)
	}
	if (st == nil || st.GetCode() == http.StatusNotFound) && atLeast > rev {
		// The object's revision is older than asked for: the store as a
		// whole may still be newer.
		if mst := s.waitForRevision(ctx, req, atLeast); mst != nil {
			writeJSON(w, int(mst.Code), mst)
			return
		}
		obj, st = s.read(ctx, req.res, req.namespace, req.name)
	}
	if st != nil {
		writeStatus(w, st)
		return
	}
	if req.sub == "log" {
		s.podLog(ctx, w, r, req, obj)
		return
	}
	s.writeObject(w, r, http.StatusOK, req.res, obj)
}

// writeObject writes one object as JSON, or as a one-row Table when the
// client asked for one.
func (s *Server) writeObject(w http.ResponseWriter, r *http.Request, code int, res *resource, obj proto.Message) {
	k, err := res.toKube(obj)
	if err != nil {
		writeStatus(w, stage.Internal(err))
		return
	}
	if wantsTable(r) {
		t := newTable(res, true, s.cfg.Printer)
		t.addRow(res, k)
		t.ResourceVersion = metaOf(k).GetResourceVersion()
		writeJSON(w, code, t.Table)
		return
	}
	writeKube(w, r, code, k)
}

// selector is a request's label and field selectors.
type selector struct {
	labels labels.Selector
	fields fields.Selector
	// cr is the custom resource version whose selectable fields the
	// field selector is evaluated on (nil for the built-in kinds).
	cr *crd.Version
}

func parseSelector(r *http.Request, res *resource) (*selector, *corev1.Status) {
	q := r.URL.Query()
	sel := &selector{labels: labels.Everything(), fields: fields.Everything()}
	var err error
	if v := q.Get("labelSelector"); v != "" {
		if sel.labels, err = labels.Parse(v); err != nil {
			return nil, badRequest("unable to parse requirement: %v", err)
		}
	}
	if v := q.Get("fieldSelector"); v != "" {
		if sel.fields, err = fields.ParseSelector(v); err != nil {
			return nil, badRequest("invalid field selector: %v", err)
		}
		if res.cr != nil {
			if st := sel.customResourceFields(res); st != nil {
				return nil, st
			}
		} else if sel.fields, err = convertFieldSelector(res, sel.fields); err != nil {
			return nil, badRequest("%v", err)
		}
	}
	return sel, nil
}

// matches evaluates the selectors on an object's Kubernetes form: labels
// on its labels, fields on the kind's selectable fields (fieldselect.go).
func (sel *selector) matches(k runtime.Object) bool {
	md := metaOf(k)
	if !sel.labels.Empty() && !sel.labels.Matches(labels.Set(md.GetLabels())) {
		return false
	}
	if sel.fields.Empty() {
		return true
	}
	if sel.cr != nil {
		_, fs, err := sel.cr.Attrs(k)
		return err == nil && sel.fields.Matches(fields.Set(fs))
	}
	return sel.fields.Matches(selectableFields(k))
}

func metaOf(k runtime.Object) metav1.Object {
	if a, ok := k.(metav1.ObjectMetaAccessor); ok {
		return a.GetObjectMeta()
	}
	if a, ok := k.(metav1.Object); ok {
		return a
	}
	return &metav1.ObjectMeta{}
}

// listKube reads the objects of a list that match sel (a linearizable
// read: never older than any write acknowledged before it) and their
// Kubernetes forms.
func (s *Server) listKube(ctx context.Context, req *request, sel *selector) ([]kubeItem, int64, *corev1.Status) {
	snap, st := s.readSnapshot(ctx, req)
	if st != nil {
		return nil, 0, st
	}
	items := make([]kubeItem, 0, len(snap.items))
	for _, it := range snap.items {
		if sel.matches(it.obj) {
			items = append(items, it)
		}
	}
	return items, snap.rev, nil
}

func dryRun(r *http.Request) (bool, *corev1.Status) {
	switch v := r.URL.Query()["dryRun"]; {
	case len(v) == 0:
		return false, nil
	case len(v) == 1 && v[0] == "All":
		return true, nil
	default:
		return false, badRequest("dryRun %q is not supported: use All", v)
	}
}

// mutation reads what every write request carries: dryRun,
// fieldValidation and the (size-limited) body. It writes the error and
// returns ok false when one is wrong.
func (s *Server) mutation(w http.ResponseWriter, r *http.Request) (dry bool, validation string, body []byte, ok bool) {
	dry, st := dryRun(r)
	if st == nil {
		validation, st = fieldValidation(r)
	}
	if st == nil {
		body, st = readBody(w, r, s.cfg.MaxBodyBytes, s.cfg.BodyReadTimeout)
	}
	if st != nil {
		writeStatus(w, st)
		return false, "", nil, false
	}
	return dry, validation, body, true
}

func (s *Server) create(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	dry, validation, body, ok := s.mutation(w, r)
	if !ok {
		return
	}
	body, st := bodyJSON(r, body, kubeType(req.res))
	if st == nil {
		body, st = defaultTypeMeta(body, req.res)
	}
	if st != nil {
		writeStatus(w, st)
		return
	}
	obj, warnings, st := decodeObject(body, req.res, validation, int(s.cfg.MaxBodyBytes))
	if st != nil {
		writeStatus(w, st)
		return
	}
	md := objects.Meta(obj)
	if st := checkNamespace(md, req); st != nil {
		writeStatus(w, st)
		return
	}
	md.ResourceVersion = ""
	manager, st := managerName(r, false, "Create")
	if st == nil {
		st = manageFields(req.res, "", nil, obj, manager)
	}
	if st != nil {
		writeStatus(w, st)
		return
	}
	writeWarnings(w, warnings)
	s.createObject(ctx, w, r, req, obj, dry)
}

// createObject creates a decoded object (POST, or server-side apply of one
// that does not exist yet): a pod through the pipeline, anything else
// through the api stage, with kube-apiserver's create-time defaults.
func (s *Server) createObject(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request, obj objects.Object, dry bool) {
	if pod, ok := obj.(*corev1.Pod); ok {
		st, created := s.backend.CreatePod(ctx, req.user, pod, dry)
		s.respond(w, r, req.res, st, created)
		return
	}
	md := objects.Meta(obj)
	if md.GetName() == "" && md.GetGenerateName() != "" {
		md.Name = md.GetGenerateName() + randomSuffix()
	}
	if ns, ok := obj.(*corev1.Namespace); ok && ns.GetStatus().GetPhase() == "" {
		ns.Status = &corev1.NamespaceStatus{Phase: "Active"} // as kube-apiserver defaults it
	}
	st, out := s.object(ctx, req, "create", obj, nil, dry) // dry: checked, not stored
	s.respond(w, r, req.res, st, out)
}

// checkNamespace defaults the object's namespace to the request's and
// refuses a mismatch, as kube-apiserver does.
func checkNamespace(md *corev1.ObjectMeta, req *request) *corev1.Status {
	if !req.res.namespaced {
		md.Namespace = ""
		return nil
	}
	if md.GetNamespace() != "" && md.GetNamespace() != req.namespace {
		return badRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	md.Namespace = req.namespace
	return nil
}

func (s *Server) object(ctx context.Context, req *request, verb string, obj objects.Object, grace *int64, dry bool) (*corev1.Status, proto.Message) {
	or := &apiv1.ObjectRequest{Verb: verb, Kind: req.res.store.Qualified(), Namespace: req.namespace, Name: req.name, GracePeriodSeconds: grace,
		DryRun: dry, Subresource: req.sub}
	if obj != nil {
		b, err := proto.Marshal(obj)
		if err != nil {
			return stage.Internal(err), nil
		}
		or.Object, or.Name = b, obj.GetMetadata().GetName()
	}
	return s.backend.Object(ctx, req.user, or)
}

// deleteObject asks the api stage to delete req's object with opts'
// grace period and garbage collection policy.
func (s *Server) deleteObject(ctx context.Context, req *request, opts *metav1.DeleteOptions) (*corev1.Status, proto.Message) {
	or := &apiv1.ObjectRequest{Verb: "delete", Kind: req.res.store.Qualified(), Namespace: req.namespace, Name: req.name,
		GracePeriodSeconds: opts.GracePeriodSeconds, Subresource: req.sub,
		OrphanDependents: opts.OrphanDependents} //nolint:staticcheck // SA1019: honoured as kube-apiserver does
	if p := opts.PropagationPolicy; p != nil {
		or.PropagationPolicy = proto.String(string(*p))
	}
	return s.backend.Object(ctx, req.user, or)
}

// respond writes a backend outcome: the object on success, else the Status.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, res *resource, st *corev1.Status, obj proto.Message) {
	if st.GetStatus() == "Failure" || st.GetCode() >= 300 {
		writeStatus(w, st)
		return
	}
	writeWarnings(w, st.GetWarnings())
	code := int(st.GetCode())
	if code == 0 {
		code = http.StatusOK
	}
	if obj == nil {
		writeJSON(w, code, kubeStatus(st))
		return
	}
	s.writeObject(w, r, code, res, obj)
}

func writeWarnings(w http.ResponseWriter, warnings []string) {
	for _, m := range warnings {
		w.Header().Add("Warning", "299 - "+strconv.Quote(m))
	}
}

// maxPatchRetries bounds how often a patch or update without a
// resourceVersion precondition is re-applied to a newer stored object
// after a conflict.
const maxPatchRetries = 16

// update serves PUT and PATCH: the new object is decoded (from the body,
// or by patching the stored object's Kubernetes form), then replaces the
// stored revision it was built from through the api stage (pods: only the
// fields Kubernetes lets a pod update change). A patch without a
// resourceVersion precondition is re-applied to the newer object when
// another write came first, as kube-apiserver's GuaranteedUpdate does, so
// it never fails with 409 (kubectl cordon, label, annotate); so is an
// update (PUT) whose object has no resourceVersion.
func (s *Server) update(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	dry, validation, body, ok := s.mutation(w, r)
	if !ok {
		return
	}
	ct := r.Header.Get("Content-Type")
	ssa := strings.HasPrefix(ct, patchApply)
	var st *corev1.Status
	if req.verb == "update" {
		if body, st = bodyJSON(r, body, kubeType(req.res)); st == nil {
			body, st = defaultTypeMeta(body, req.res)
		}
		if st != nil {
			writeStatus(w, st)
			return
		}
	}
	kind := "Update"
	if req.verb == "patch" {
		kind = "Patch"
	}
	manager, st := managerName(r, ssa, kind)
	if st != nil {
		writeStatus(w, st)
		return
	}
	force := ssa && queryBool(r.URL.Query(), "force")
	if v := r.URL.Query().Get("force"); v != "" && !ssa {
		writeStatus(w, invalid("PatchOptions.meta.k8s.io", "", []*corev1.StatusCause{{Type: "FieldValueForbidden", Field: "force",
			Message: "Forbidden: may not be specified for non-apply patch"}},
			`PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch`))
		return
	}
	retry := req.verb == "patch" && !patchHasPrecondition(body, ct)
	for attempt := 0; ; attempt++ {
		current, st := s.read(ctx, req.res, req.namespace, req.name)
		if st != nil && !(ssa && st.GetCode() == 404) {
			writeStatus(w, st)
			return
		}
		obj, warnings, st := s.updated(req, current, body, ct, validation, manager, force)
		if st != nil {
			writeStatus(w, st)
			return
		}
		if _, generic := obj.(*corev1.Unstructured); !generic && obj.GetMetadata().GetResourceVersion() == "0" {
			// "0" is no resourceVersion, as kube-apiserver's versioner
			// parses it: the update is unconditional where the kind
			// allows it (e2e's node UpdateStatus sets "0").
			obj.GetMetadata().ResourceVersion = ""
		}
		if current == nil && isPodStatusWrite(req) { // an apply to the status of no pod
			writeStatus(w, stage.NotFound(req.res.name, req.name))
			return
		}
		if current == nil {
			writeWarnings(w, warnings)
			s.createObject(ctx, w, r, req, obj, dry)
			return
		}
		rv := obj.GetMetadata().GetResourceVersion()
		if rv != "" && rv != current.GetMetadata().GetResourceVersion() {
			writeStatus(w, conflict(req.res.name, req.name))
			return
		}
		// An update without a resourceVersion is unconditional (where the
		// kind allows it; the registry refuses it elsewhere): a write that
		// lost a race to another is applied again to what that one stored,
		// as kube-apiserver's GuaranteedUpdate does.
		retry := retry || (req.verb == "update" && rv == "")
		if keepUnchanged(current, obj) {
			if _, isPod := obj.(*corev1.Pod); !isPod { // a pod: updatePod writes nothing
				writeWarnings(w, warnings)
				s.writeObject(w, r, http.StatusOK, req.res, current)
				return
			}
		}
		if pod, ok := obj.(*corev1.Pod); ok && req.sub == "status" {
			// An update without a resourceVersion is unconditional, as
			// for kube-apiserver's pods: a conflict is retried.
			unconditional := req.verb == "update" && pod.GetMetadata().GetResourceVersion() == ""
			st, out := s.updatePodStatus(ctx, current.(*corev1.Pod), pod, dry)
			if (retry || unconditional) && st.GetCode() == http.StatusConflict && attempt < maxPatchRetries && ctx.Err() == nil {
				continue
			}
			writeWarnings(w, warnings)
			s.respond(w, r, req.res, st, out)
			return
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			writeWarnings(w, warnings)
			st, out := s.updatePod(ctx, req.user, current.(*corev1.Pod), pod, dry)
			s.respond(w, r, req.res, st, out)
			return
		}
		if ns, ok := obj.(*corev1.Namespace); ok && req.sub != "" {
			st, out := s.updateNamespaceSub(ctx, req, current.(*corev1.Namespace), ns, dry)
			if retry && st.GetCode() == http.StatusConflict && attempt < maxPatchRetries && ctx.Err() == nil {
				continue
			}
			writeWarnings(w, warnings)
			s.respond(w, r, req.res, st, out)
			return
		}
		if svc, ok := obj.(*corev1.Service); ok && req.sub == "status" {
			st, out := s.updateServiceStatus(ctx, req, current.(*corev1.Service), svc, dry)
			if retry && st.GetCode() == http.StatusConflict && attempt < maxPatchRetries && ctx.Err() == nil {
				continue
			}
			writeWarnings(w, warnings)
			s.respond(w, r, req.res, st, out)
			return
		}
		if node, ok := obj.(*corev1.Node); ok && req.sub == "status" {
			st, out := s.updateNodeStatus(ctx, req, current.(*corev1.Node), node, dry)
			if retry && st.GetCode() == http.StatusConflict && attempt < maxPatchRetries && ctx.Err() == nil {
				continue
			}
			writeWarnings(w, warnings)
			s.respond(w, r, req.res, st, out)
			return
		}
		st, out := s.object(ctx, req, "update", obj, nil, dry)
		if retry && st.GetCode() == http.StatusConflict && st.GetReason() == eventsv1.ReasonConflict && attempt < maxPatchRetries && ctx.Err() == nil {
			continue
		}
		writeWarnings(w, warnings)
		s.respond(w, r, req.res, st, out)
		return
	}
}

// updated builds the object an update or patch asks for from the stored
// one (nil: a server-side apply of a new object) and checks its name and
// namespace; its managedFields record manager's write through req.sub.
func (s *Server) updated(req *request, current objects.Object, body []byte, ct, validation, manager string, force bool) (objects.Object, []string, *corev1.Status) {
	var st *corev1.Status
	var applyWarnings []string
	ssa := req.verb == "patch" && strings.HasPrefix(ct, patchApply) && managesFields(req.res)
	if ssa {
		if current == nil {
			attrs := auth.Attributes{User: req.user, Verb: "create", Namespace: req.namespace,
				APIGroup: req.res.group, Resource: req.res.name, Name: req.name}
			if !s.backend.Authorize(attrs).Allowed {
				return nil, nil, auth.Forbidden(attrs, "")
			}
		}
		patch := body
		if body, st = applyConfiguration(req.res, req.sub, current, body, manager, force); st != nil {
			return nil, nil, st
		}
		// Field validation of the applied configuration itself, as
		// kube-apiserver's apply patcher: its duplicate keys.
		if validation != validationIgnore {
			if err := yaml.UnmarshalStrict(patch, &map[string]any{}); err != nil {
				if validation == validationStrict {
					return nil, nil, badRequest("error strict decoding patch: %v", err)
				}
				applyWarnings = append(applyWarnings, err.Error())
			}
		}
	} else if req.verb == "patch" {
		orig := []byte("{}")
		if current == nil { // server-side apply of a new object: a create
			attrs := auth.Attributes{User: req.user, Verb: "create", Namespace: req.namespace,
				APIGroup: req.res.group, Resource: req.res.name, Name: req.name}
			if !s.backend.Authorize(attrs).Allowed {
				return nil, nil, auth.Forbidden(attrs, "")
			}
		} else {
			k, err := req.res.toKube(current)
			if err != nil {
				return nil, nil, stage.Internal(err)
			}
			if orig, err = json.Marshal(k); err != nil {
				return nil, nil, stage.Internal(err)
			}
		}
		if body, st = applyPatch(orig, body, ct, req.res, s.patchLimits()); st != nil {
			return nil, nil, st
		}
	}
	obj, warnings, st := decodeObject(body, req.res, validation, int(s.cfg.MaxBodyBytes))
	if st != nil {
		return nil, nil, st
	}
	md := objects.Meta(obj)
	if st := checkNamespace(md, req); st != nil {
		return nil, nil, st
	}
	if md.GetName() != req.name {
		return nil, nil, badRequest("the name of the object (%s) does not match the name on the URL (%s)", md.GetName(), req.name)
	}
	if !ssa { // an apply's result carries its managedFields
		if st := manageFields(req.res, req.sub, current, obj, manager); st != nil {
			return nil, nil, st
		}
	}
	return obj, append(applyWarnings, warnings...), nil
}

// patchHasPrecondition reports whether a patch sets metadata.resourceVersion
// (a precondition: a conflict is the client's to resolve).
func patchHasPrecondition(patch []byte, contentType string) bool {
	ct, _, _ := strings.Cut(contentType, ";")
	switch strings.TrimSpace(ct) {
	case patchJSON:
		var ops []struct {
			Path string `json:"path"`
		}
		_ = json.Unmarshal(patch, &ops)
		for _, op := range ops {
			if op.Path == "/metadata/resourceVersion" {
				return true
			}
		}
		return false
	case patchApply:
		if j, err := yaml.YAMLToJSON(patch); err == nil {
			patch = j
		}
	}
	var p struct {
		Metadata struct {
			ResourceVersion *json.RawMessage `json:"resourceVersion"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(patch, &p)
	return p.Metadata.ResourceVersion != nil && string(*p.Metadata.ResourceVersion) != "null"
}

// updatePod applies the changes Kubernetes allows on a pod: labels,
// annotations, ownerReferences, finalizers, container images, added tolerations and removed
// scheduling gates. Anything else in spec is refused with 422, as
// kube-apiserver's validation refuses it; status is left alone. A new
// image has the pod evaluated against its namespace's Pod Security level
// (checkPodSecurity), as kube-apiserver's PodSecurity admission does.
func (s *Server) updatePod(ctx context.Context, user *corev1.UserInfo, current, pod *corev1.Pod, dry bool) (*corev1.Status, proto.Message) {
	name := current.GetMetadata().GetName()
	pod, warnings, st := s.mutatePodUpdate(ctx, user, current, pod, dry) // the mutating webhooks, first
	if st != nil {
		st.Warnings = append(warnings, st.Warnings...)
		return st, nil
	}
	allowed := proto.CloneOf(current.GetSpec())
	for i, c := range pod.GetSpec().GetContainers() {
		if i < len(allowed.GetContainers()) {
			allowed.Containers[i].Image = c.GetImage()
		}
	}
	for i, c := range pod.GetSpec().GetInitContainers() {
		if i < len(allowed.GetInitContainers()) {
			allowed.InitContainers[i].Image = c.GetImage()
		}
	}
	if len(pod.GetSpec().GetTolerations()) >= len(allowed.GetTolerations()) {
		allowed.Tolerations = pod.GetSpec().GetTolerations()
	}
	if gatesRemoved(current.GetSpec().GetSchedulingGates(), pod.GetSpec().GetSchedulingGates()) {
		allowed.SchedulingGates = pod.GetSpec().GetSchedulingGates()
	}
	if errs := activeDeadlineUpdate(current.GetSpec().ActiveDeadlineSeconds, pod.GetSpec().ActiveDeadlineSeconds); len(errs) > 0 {
		return validate.InvalidStatus("Pod", name, errs), nil
	}
	allowed.ActiveDeadlineSeconds = pod.GetSpec().ActiveDeadlineSeconds
	if !proto.Equal(allowed, pod.GetSpec()) {
		return invalid("Pod", name, []*corev1.StatusCause{{Type: "FieldValueForbidden", Field: "spec",
			Message: "Forbidden: pod updates may not change fields other than " + updatablePodSpecFields}},
			"Pod %q is invalid: spec: Forbidden: pod updates may not change fields other than %s", name, updatablePodSpecFields), nil
	}
	if current.GetMetadata().GetDeletionTimestamp() != nil {
		// kube's ValidateObjectMetaUpdate: finalizers may only go.
		extra := sets.New(pod.GetMetadata().GetFinalizers()...).Difference(sets.New(current.GetMetadata().GetFinalizers()...))
		if extra.Len() > 0 {
			msg := fmt.Sprintf("Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers %#v", sets.List(extra))
			return invalid("Pod", name, []*corev1.StatusCause{{Type: "FieldValueForbidden", Field: "metadata.finalizers", Message: msg}},
				"Pod %q is invalid: metadata.finalizers: %s", name, msg), nil
		}
	}
	apply := func(p *corev1.Pod) {
		p.Metadata.Labels = pod.GetMetadata().GetLabels()
		p.Metadata.Annotations = pod.GetMetadata().GetAnnotations()
		p.Metadata.OwnerReferences = pod.GetMetadata().GetOwnerReferences()
		p.Metadata.ManagedFields = pod.GetMetadata().GetManagedFields()
		p.Metadata.Finalizers = pod.GetMetadata().GetFinalizers()
		if !proto.Equal(p.GetSpec(), allowed) {
			p.Metadata.Generation++ // kube's updatePodGeneration
		}
		p.Spec = proto.CloneOf(allowed)
	}
	next := proto.CloneOf(current)
	apply(next)
	if st := s.checkPodSecurity(ctx, current, next); st != nil { // an image changed: its namespace's level
		return st, nil
	}
	w, st := s.validatePodUpdate(ctx, user, current, next, dry) // the policies and validating webhooks, last
	warnings = append(warnings, w...)
	if st != nil {
		st.Warnings = append(warnings, st.Warnings...)
		return st, nil
	}
	ok := stage.Success(200, "pods", name)
	ok.Warnings = warnings
	if dry {
		out := proto.CloneOf(current)
		apply(out)
		return ok, out
	}
	out, err := objects.Mutate(ctx, s.store, current.GetMetadata().GetNamespace(), name, func(p *corev1.Pod) error {
		before := proto.CloneOf(p)
		apply(p)
		if proto.Equal(before, p) {
			return objects.ErrNoChange
		}
		return nil
	})
	if err != nil {
		return storeStatus(err, lookupResource("v1", "pods"), name), nil
	}
	if md := out.GetMetadata(); len(md.GetFinalizers()) == 0 && md.GetDeletionTimestamp() != nil && md.DeletionGracePeriodSeconds != nil && *md.DeletionGracePeriodSeconds == 0 {
		// Held for the finalizers this update removed (its node is done,
		// stage.HoldForFinalizers): the update deletes it, as
		// kube-apiserver's generic store does.
		if _, err := s.store.Delete(ctx, objects.Pods, md.GetNamespace(), name, objects.Revision(out)); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			return storeStatus(err, lookupResource("v1", "pods"), name), nil
		}
	}
	return ok, out
}

// updatablePodSpecFields names what a pod update may change (kube's
// list, but for terminationGracePeriodSeconds, which podflow never
// stores negative).
const updatablePodSpecFields = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`," +
	"`spec.tolerations` (only additions to existing tolerations)"

// activeDeadlineUpdate checks a change of spec.activeDeadlineSeconds as
// kube's ValidatePodUpdate: it may be set where there was none, or
// lowered, never raised or removed.
func activeDeadlineUpdate(old, next *int64) field.ErrorList {
	p := field.NewPath("spec", "activeDeadlineSeconds")
	switch {
	case next == nil && old != nil:
		return field.ErrorList{field.Invalid(p, next, "must not update from a positive integer to nil value")}
	case next == nil:
		return nil
	case *next < 0 || *next > math.MaxInt32:
		return field.ErrorList{field.Invalid(p, *next, utilvalidation.InclusiveRangeError(0, math.MaxInt32))}
	case old != nil && *old < *next:
		return field.ErrorList{field.Invalid(p, *next, "must be less than or equal to previous value")}
	}
	return nil
}

// gatesRemoved reports whether next is current with gates removed (or
// unchanged): Kubernetes lets an update remove scheduling gates, never add
// one.
func gatesRemoved(current, next []*corev1.PodSchedulingGate) bool {
	had := make(map[string]bool, len(current))
	for _, g := range current {
		had[g.GetName()] = true
	}
	for _, g := range next {
		if !had[g.GetName()] {
			return false
		}
		delete(had, g.GetName()) // each gate once
	}
	return true
}

// deleteOptions reads a delete's DeleteOptions (body) and
// gracePeriodSeconds (query, which wins), or writes the error.
func (s *Server) deleteOptions(w http.ResponseWriter, r *http.Request) (*metav1.DeleteOptions, bool) {
	var opts metav1.DeleteOptions
	body, st := readBody(w, r, s.cfg.MaxBodyBytes, s.cfg.BodyReadTimeout)
	if st == nil {
		body, st = bodyJSON(r, body, func() runtime.Object { return &metav1.DeleteOptions{} })
	}
	if st == nil && len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &opts); err != nil {
			st = badRequest("decode DeleteOptions: %v", err)
		}
	}
	if v := r.URL.Query().Get("gracePeriodSeconds"); st == nil && v != "" {
		g, err := strconv.ParseInt(v, 10, 64)
		if err != nil || g < 0 {
			st = badRequest("gracePeriodSeconds %q is not a non-negative integer", v)
		}
		opts.GracePeriodSeconds = &g
	}
	if v := r.URL.Query().Get("propagationPolicy"); st == nil && v != "" {
		p := metav1.DeletionPropagation(v)
		opts.PropagationPolicy = &p
	}
	if v := r.URL.Query().Get("orphanDependents"); st == nil && v != "" {
		o, err := strconv.ParseBool(v)
		if err != nil {
			st = badRequest("orphanDependents %q is not a boolean", v)
		}
		opts.OrphanDependents = &o //nolint:staticcheck // SA1019: honoured as kube-apiserver does
	}
	if st == nil { // rest.BeforeDelete's check, with its error
		if errs := metav1validation.ValidateDeleteOptions(&opts); len(errs) > 0 {
			st = validate.InvalidStatus("DeleteOptions.meta.k8s.io", "", errs)
		}
	}
	if st != nil {
		writeStatus(w, st)
		return nil, false
	}
	return &opts, true
}

func (s *Server) delete(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	opts, ok := s.deleteOptions(w, r)
	if !ok {
		return
	}
	if p := opts.Preconditions; p != nil && (p.UID != nil || p.ResourceVersion != nil) {
		cur, st := s.read(ctx, req.res, req.namespace, req.name)
		if st != nil {
			writeStatus(w, st)
			return
		}
		if (p.UID != nil && string(*p.UID) != cur.GetMetadata().GetUid()) ||
			(p.ResourceVersion != nil && *p.ResourceVersion != cur.GetMetadata().GetResourceVersion()) {
			writeStatus(w, conflict(req.res.name, req.name))
			return
		}
	}
	st, out := s.deleteObject(ctx, req, opts)
	if st.GetCode() < 300 && out == nil {
		k := kubeStatus(st)
		k.Status = metav1.StatusSuccess
		k.Details = &metav1.StatusDetails{Name: req.name, Kind: req.res.name}
		writeJSON(w, http.StatusOK, k)
		return
	}
	s.respond(w, r, req.res, st, out)
}

// deleteCollection serves DELETE on a collection (deletecollection): every
// object matching the label and field selectors is deleted through the api
// stage, as one DELETE each (a pod gracefully), and the response is the
// list of them as the deletes left them, as kube-apiserver answers.
// Objects deleted meanwhile by someone else are skipped; the first other
// failure ends it.
func (s *Server) deleteCollection(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	sel, st := parseSelector(r, req.res)
	if st != nil {
		writeStatus(w, st)
		return
	}
	opts, ok := s.deleteOptions(w, r)
	if !ok {
		return
	}
	if dry, st := dryRun(r); st != nil || dry {
		if st == nil {
			st = badRequest("dryRun is not supported for deletecollection")
		}
		writeStatus(w, st)
		return
	}
	items, rev, st := s.listKube(ctx, req, sel)
	if st != nil {
		writeStatus(w, st)
		return
	}
	deleted := make([]kubeItem, 0, len(items))
	for _, it := range items {
		one := *req
		one.name, one.verb = metaOf(it.obj).GetName(), "delete"
		if req.namespace == "" {
			one.namespace = metaOf(it.obj).GetNamespace()
		}
		st, out := s.deleteObject(ctx, &one, opts)
		switch {
		case st.GetCode() == http.StatusNotFound:
			continue
		case st.GetStatus() == "Failure" || st.GetCode() >= 300:
			writeStatus(w, st)
			return
		case out != nil:
			k, err := req.res.toKube(out)
			if err != nil {
				writeStatus(w, stage.Internal(err))
				return
			}
			raw, err := json.Marshal(k)
			if err != nil {
				writeStatus(w, stage.Internal(err))
				return
			}
			it = kubeItem{key: it.key, obj: k, raw: raw}
		}
		deleted = append(deleted, it)
	}
	writeList(w, r, req.res, metav1.ListMeta{ResourceVersion: strconv.FormatInt(rev, 10)}, deleted)
}

// writeList writes a list of items: protobuf when the client prefers it
// and the kind has a typed list, else JSON assembled from the items'
// cached JSON.
func writeList(w http.ResponseWriter, r *http.Request, res *resource, lm metav1.ListMeta, items []kubeItem) {
	if wantsProtobuf(r) {
		if list, ok := typedList(res, items, lm); ok {
			writeKube(w, r, http.StatusOK, list)
			return
		}
	}
	l := newRawList(res, 0, items)
	l.Metadata = lm
	writeJSON(w, http.StatusOK, l)
}

// decodeReview reads an authorization review of kind into review (JSON or
// protobuf bodies, size-limited), or writes the error and returns false.
func (s *Server) decodeReview(w http.ResponseWriter, r *http.Request, review runtime.Object, kind string) bool {
	body, st := readBody(w, r, s.cfg.MaxBodyBytes, s.cfg.BodyReadTimeout)
	if st != nil {
		writeStatus(w, st)
		return false
	}
	if body, st = bodyJSON(r, body, func() runtime.Object { return review.DeepCopyObject() }); st != nil {
		writeStatus(w, st)
		return false
	}
	if err := json.Unmarshal(body, review); err != nil {
		writeStatus(w, badRequest("decode %s: %v", kind, err))
		return false
	}
	return true
}

// selfSubjectAccessReview answers `kubectl auth can-i`: any authenticated
// user may ask what it may do.
func (s *Server) selfSubjectAccessReview(w http.ResponseWriter, r *http.Request, req *request) {
	var review authorizationv1.SelfSubjectAccessReview
	if !s.decodeReview(w, r, &review, "SelfSubjectAccessReview") {
		return
	}
	review.APIVersion, review.Kind = "authorization.k8s.io/v1", "SelfSubjectAccessReview"
	switch ra, nra := review.Spec.ResourceAttributes, review.Spec.NonResourceAttributes; {
	case ra != nil:
		d := s.backend.Authorize(auth.Attributes{User: req.user, Verb: ra.Verb, Namespace: ra.Namespace, APIGroup: ra.Group,
			Resource: ra.Resource, Subresource: ra.Subresource, Name: ra.Name})
		review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: d.Allowed, Reason: d.Reason}
	case nra != nil:
		// Non-resource URLs (/healthz, /version, ...) are open to every
		// authenticated user here; RBAC's nonResourceURLs are not modelled.
		review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: nra.Verb == "get",
			Reason: "podflow allows GET of non-resource URLs to every authenticated user"}
	default:
		writeStatus(w, invalid("SelfSubjectAccessReview", "", []*corev1.StatusCause{{Type: "FieldValueRequired", Field: "spec.resourceAttributes",
			Message: "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified"}},
			"SelfSubjectAccessReview.authorization.k8s.io %q is invalid: spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified", ""))
		return
	}
	writeJSON(w, http.StatusCreated, &review)
}

// selfSubjectRulesReview answers `kubectl auth can-i --list`: the rules of
// the roles bound to the user in spec.namespace (and cluster-wide).
func (s *Server) selfSubjectRulesReview(w http.ResponseWriter, r *http.Request, req *request) {
	var review authorizationv1.SelfSubjectRulesReview
	if !s.decodeReview(w, r, &review, "SelfSubjectRulesReview") {
		return
	}
	review.APIVersion, review.Kind = "authorization.k8s.io/v1", "SelfSubjectRulesReview"
	status := authorizationv1.SubjectRulesReviewStatus{
		ResourceRules: []authorizationv1.ResourceRule{},
		// As for SelfSubjectAccessReview: GET of non-resource URLs is open
		// to every authenticated user; RBAC's nonResourceURLs are not
		// modelled.
		NonResourceRules: []authorizationv1.NonResourceRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"*"}}},
	}
	for _, rule := range s.backend.RulesFor(req.user, review.Spec.Namespace) {
		status.ResourceRules = append(status.ResourceRules, authorizationv1.ResourceRule{
			Verbs: rule.GetVerbs(), APIGroups: rule.GetApiGroups(), Resources: rule.GetResources(), ResourceNames: rule.GetResourceNames(),
		})
	}
	review.Status = status
	writeJSON(w, http.StatusCreated, &review)
}

// randomSuffix is a generateName suffix in Kubernetes' alphabet.
func randomSuffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

// selectedName is the name a request is authorized for: its own, or for a
// list or watch the name its field selector requires exactly
// (metadata.name=NAME), as kube's RequestInfoFactory: a rule with
// resourceNames then allows listing and watching that one object.
func selectedName(req *request, q url.Values) string {
	if req.name != "" || (req.verb != "list" && req.verb != "watch") {
		return req.name
	}
	sel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return "" // refused as a bad request after authorization
	}
	if name, ok := sel.RequiresExactMatch("metadata.name"); ok && len(apipath.IsValidPathSegmentName(name)) == 0 {
		return name
	}
	return ""
}

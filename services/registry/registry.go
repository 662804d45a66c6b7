package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/kubernetes/pkg/capabilities"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
)

// Sentinel errors of the package.
var (
	// ErrNoStrategy: the kind is not one the registry has kube-apiserver's
	// strategies for (a kind registered at run time).
	ErrNoStrategy = errors.New("registry: no strategy for the kind")
	// ErrCapabilities: kube's process-wide capabilities were initialized
	// before the first Registry, without AllowPrivileged.
	ErrCapabilities = errors.New("registry: kube capabilities initialized without AllowPrivileged before the registry")
)

// Config configures a Registry.
type Config struct {
	// Authorize decides what a strategy authorizes itself: a
	// ValidatingAdmissionPolicy's paramKind and a binding's paramRef
	// (read access for the writer). Nil: those checks are skipped.
	Authorize func(auth.Attributes) auth.Decision
	// Store is read for what a strategy looks up (the policy a
	// ValidatingAdmissionPolicyBinding binds). Nil: nothing is read.
	Store *objects.Store
}

// DefaultConfig returns a Config without authorizer and store.
func DefaultConfig() Config { return Config{} }

// Validate checks the Config (every field is optional).
func (c Config) Validate() error { return nil }

// Registry applies kube-apiserver's write semantics to generic kinds. It
// is safe for concurrent use.
type Registry struct {
	cfg   Config
	kinds map[schema.GroupKind]*strategies
}

// New returns a Registry of every built-in generic kind.
func New(cfg Config) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := allowPrivileged(); err != nil {
		return nil, err
	}
	var authz authorizer.UnconditionalAuthorizer
	if cfg.Authorize != nil {
		authz = authorizerFunc(cfg.Authorize)
	}
	return &Registry{cfg: cfg, kinds: builtins(authz, cfg.Store)}, nil
}

// allowPrivileged sets up kube's process-wide capabilities as
// kube-apiserver does with --allow-privileged=true (every conformant
// cluster's setting): the pod template validation of the strategies then
// accepts securityContext.privileged and hostProcess containers instead of
// refusing them as "disallowed by cluster policy". Whether a privileged pod
// may run is Pod Security admission's decision (the namespace's
// pod-security.kubernetes.io/enforce label), as in Kubernetes.
// capabilities.Setup takes effect once per process: if kube's validation
// ran before it (capabilities.Get initializes them to kube's defaults), the
// setting did not take and New says so rather than refuse privileged pods.
func allowPrivileged() error {
	capabilities.Setup(true, 0)
	if !capabilities.Get().AllowPrivileged {
		return ErrCapabilities
	}
	return nil
}

var defaultRegistry = sync.OnceValue(func() *Registry {
	r, err := New(DefaultConfig())
	if err != nil {
		panic(err)
	}
	return r
})

// Default is a shared Registry of DefaultConfig, for what needs no
// authorizer or store (printing, tests).
func Default() *Registry { return defaultRegistry() }

// Handles reports whether the registry has strategies for k.
func (r *Registry) Handles(k objects.Kind) bool {
	_, ok := r.kinds[schema.GroupKind{Group: k.APIGroup, Kind: k.Name}]
	return ok
}

// PrepareCreate prepares obj, a new object of a generic kind, for the
// store as kube-apiserver's generic registry does before it writes: the
// version's defaults, uid and creationTimestamp
// (rest.FillObjectMetaSystemFields), then the kind's strategy through
// rest.BeforeCreate (PrepareForCreate — status reset, generation 1, a
// Job's selector —, Validate, the metadata checks, Canonicalize). obj is
// replaced by the result. It returns the strategy's warnings for the
// client, or the failure as kube-apiserver's Status (422 Invalid with a
// cause per field error, ...). user is the writer (a strategy may record
// or authorize it); subresource must be empty (nothing is created
// through one).
func (r *Registry) PrepareCreate(ctx context.Context, user *corev1.UserInfo, subresource string, obj *corev1.Unstructured) ([]string, *corev1.Status) {
	st, err := r.strategiesOf(obj)
	if err != nil {
		return nil, statusOf(err)
	}
	if subresource != "" {
		return nil, statusOf(apierrors.NewMethodNotSupported(schema.GroupResource{}, "create through "+subresource))
	}
	in, err := toInternal(st.scheme, obj)
	if err != nil {
		return nil, statusOf(err)
	}
	acc, err := meta.Accessor(in)
	if err != nil {
		return nil, statusOf(err)
	}
	rest.FillObjectMetaSystemFields(acc)
	ctx, rec := requestContext(ctx, user, subresource, "create", obj)
	if err := rest.BeforeCreate(st.create, ctx, in); err != nil {
		return nil, statusOf(err)
	}
	if err := fromInternal(st.scheme, in, obj); err != nil {
		return nil, statusOf(err)
	}
	return rec.warnings, nil
}

// PrepareUpdate prepares obj, the new state of old (as stored), as
// kube-apiserver does before it writes an update: the version's defaults
// on both, then rest.BeforeUpdate with the strategy of the subresource
// written through ("": the object's — status kept as stored, generation
// bumped on a spec change; "status": spec and metadata kept as stored;
// "scale": the Scale validated first, then the object's; "approval": a
// CertificateSigningRequest's). obj is replaced by the result.
func (r *Registry) PrepareUpdate(ctx context.Context, user *corev1.UserInfo, subresource string, obj, old *corev1.Unstructured) ([]string, *corev1.Status) {
	st, err := r.strategiesOf(obj)
	if err != nil {
		return nil, statusOf(err)
	}
	strategy, ok := st.update[subresource]
	if !ok {
		return nil, statusOf(apierrors.NewNotFound(schema.GroupResource{}, subresource))
	}
	in, err := toInternal(st.scheme, obj)
	if err != nil {
		return nil, statusOf(err)
	}
	oldIn, err := toInternal(st.scheme, old)
	if err != nil {
		return nil, statusOf(err)
	}
	// An update without a resourceVersion is unconditional where the
	// kind's strategy allows it: kube-apiserver's generic store gives it
	// the stored object's version before validating (elsewhere validation
	// refuses it: "must be specified for an update").
	ctx, rec := requestContext(ctx, user, subresource, "update", obj)
	if strategy.AllowUnconditionalUpdate(ctx) {
		if m, err := meta.Accessor(in); err == nil && m.GetResourceVersion() == "" {
			if om, err := meta.Accessor(oldIn); err == nil {
				m.SetResourceVersion(om.GetResourceVersion())
			}
		}
	}
	if subresource == "scale" {
		if err := validateScale(in); err != nil {
			return nil, statusOf(err)
		}
	}
	if err := rest.BeforeUpdate(strategy, ctx, in, oldIn); err != nil {
		return nil, statusOf(err)
	}
	if err := fromInternal(st.scheme, in, obj); err != nil {
		return nil, statusOf(err)
	}
	return rec.warnings, nil
}

func (r *Registry) strategiesOf(obj *corev1.Unstructured) (*strategies, error) {
	gv, err := schema.ParseGroupVersion(obj.GetApiVersion())
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	st, ok := r.kinds[gv.WithKind(obj.GetKind()).GroupKind()]
	if !ok {
		return nil, fmt.Errorf("%w: %s %s", ErrNoStrategy, obj.GetApiVersion(), obj.GetKind())
	}
	return st, nil
}

// toInternal converts u to its kind's internal type, defaulted as its
// version defaults.
func toInternal(sc *runtime.Scheme, u *corev1.Unstructured) (runtime.Object, error) {
	ext, err := manifest.ToKube(u)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	gvk := ext.GetObjectKind().GroupVersionKind()
	if !sc.Recognizes(gvk) {
		return nil, fmt.Errorf("%w: %s", ErrNoStrategy, gvk)
	}
	typed := ext
	if _, ok := ext.(runtime.Unstructured); ok { // a Go type manifest lacks
		if typed, err = sc.New(gvk); err != nil {
			return nil, err
		}
		if err := sc.Convert(ext, typed, nil); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	}
	sc.Default(typed)
	in, err := sc.New(gvk.GroupKind().WithVersion(runtime.APIVersionInternal))
	if err != nil {
		return nil, err
	}
	if err := sc.Convert(typed, in, nil); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return in, nil
}

// fromInternal converts in back to u's version, defaulted, and replaces
// u with it. kube-apiserver's storage defaults every object it decodes, so
// what a strategy cleared reads back defaulted: a new
// PersistentVolumeClaim's status (PrepareForCreate resets it) has phase
// Pending; podflow stores the object as it will be read.
func fromInternal(sc *runtime.Scheme, in runtime.Object, u *corev1.Unstructured) error {
	gv, err := schema.ParseGroupVersion(u.GetApiVersion())
	if err != nil {
		return err
	}
	ext, err := sc.ConvertToVersion(in, gv)
	if err != nil {
		return err
	}
	sc.Default(ext)
	ext.GetObjectKind().SetGroupVersionKind(gv.WithKind(u.GetKind()))
	m, err := manifest.FromKube(ext)
	if err != nil {
		return err
	}
	out, ok := m.(*corev1.Unstructured)
	if !ok {
		return fmt.Errorf("registry: %s converted to %T", u.GetKind(), m)
	}
	proto.Reset(u)
	proto.Merge(u, out)
	return nil
}

// requestContext is the context kube-apiserver's handlers give a strategy:
// the request (verb, group, version, resource, subresource — declarative
// validation reads it), the namespace, the user and a recorder of the
// warnings it adds.
func requestContext(ctx context.Context, usr *corev1.UserInfo, subresource, verb string, u *corev1.Unstructured) (context.Context, *recorder) {
	rec := &recorder{}
	ns, name := u.GetMetadata().GetNamespace(), u.GetMetadata().GetName()
	gv, _ := schema.ParseGroupVersion(u.GetApiVersion())
	info := &genericapirequest.RequestInfo{IsResourceRequest: true, Verb: verb, APIPrefix: "apis", APIGroup: gv.Group, APIVersion: gv.Version,
		Namespace: ns, Subresource: subresource, Name: name}
	if gv.Group == "" {
		info.APIPrefix = "api"
	}
	if k, err := objects.KindOf(u); err == nil {
		info.Resource = k.Resource
	}
	info.Parts = []string{info.Resource}
	if name != "" {
		info.Parts = append(info.Parts, name)
	}
	if subresource != "" {
		info.Parts = append(info.Parts, subresource)
	}
	ctx = genericapirequest.WithRequestInfo(ctx, info)
	ctx = genericapirequest.WithNamespace(ctx, ns)
	if usr != nil {
		ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: usr.GetUsername(), UID: usr.GetUid(), Groups: usr.GetGroups()})
	}
	return warning.WithWarningRecorder(ctx, rec), rec
}

// recorder collects a request's warnings (warning.Recorder), each once.
type recorder struct {
	mu       sync.Mutex
	warnings []string
}

func (r *recorder) AddWarning(_, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.warnings {
		if w == text {
			return
		}
	}
	r.warnings = append(r.warnings, text)
}

// authorizerFunc adapts podflow's RBAC to kube-apiserver's Authorizer.
type authorizerFunc func(auth.Attributes) auth.Decision

func (f authorizerFunc) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	var u *corev1.UserInfo
	if a.GetUser() != nil {
		u = &corev1.UserInfo{Username: a.GetUser().GetName(), Uid: a.GetUser().GetUID(), Groups: a.GetUser().GetGroups()}
	}
	d := f(auth.Attributes{User: u, Verb: a.GetVerb(), Namespace: a.GetNamespace(), APIGroup: a.GetAPIGroup(),
		Resource: a.GetResource(), Subresource: a.GetSubresource(), Name: a.GetName()})
	if d.Allowed {
		return authorizer.DecisionAllow, d.Reason, nil
	}
	return authorizer.DecisionNoOpinion, d.Reason, nil
}

// statusOf converts an error to podflow's Status: a Kubernetes API error
// with its code, reason, message and causes; anything else a 500.
func statusOf(err error) *corev1.Status {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		se = apierrors.NewInternalError(err)
	}
	return StatusOf(se.Status())
}

// StatusOf converts a meta/v1 Status to podflow's.
func StatusOf(s metav1.Status) *corev1.Status {
	st := &corev1.Status{Status: s.Status, Message: s.Message, Reason: string(s.Reason), Code: s.Code}
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	if d := s.Details; d != nil {
		st.Name, st.Kind = d.Name, d.Kind
		for _, c := range d.Causes {
			st.Causes = append(st.Causes, &corev1.StatusCause{Type: string(c.Type), Message: c.Message, Field: c.Field})
		}
	}
	return st
}

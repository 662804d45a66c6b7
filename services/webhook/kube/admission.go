// Package kube is podflow's dynamic admission: kube-apiserver's own
// admission plugins — MutatingAdmissionWebhook, ValidatingAdmissionWebhook
// (k8s.io/apiserver/pkg/admission/plugin/webhook) and
// ValidatingAdmissionPolicy (…/plugin/policy/validating) — run over
// podflow's store through services/storeclient, as webhook.Admitter.
// Rules, namespace and object selectors, matchConditions and policies'
// CEL (with kube's cost limits), failurePolicy, timeouts, sideEffects and
// dry run, reinvocation, matchPolicy Equivalent, AdmissionReview v1 over
// HTTPS with the caBundle, JSONPatch, warnings and audit annotations, and
// every message, are kube-apiserver's because the code is.
//
// Each write is given to the plugins as kube-apiserver gives it: the
// object in its internal form (legacyscheme: the k8s.io/api form, with the
// version's defaults, converted), a kind without one (a custom resource)
// as *unstructured.Unstructured. A webhook's clientConfig.service is
// resolved to a Ready endpoint of the Service (its EndpointSlices), as
// kube-apiserver does with --enable-aggregator-routing, so the process
// calling it needs a route to the pods (on the Linux runtime the host has
// one).
//
// Every call is recorded as a webhook.Call: the plugins' own tracing spans
// (component-base tracing) are taken by an in-process OpenTelemetry
// tracer, and the HTTP answer each webhook gave is noted on its span by
// the webhook client's transport.
//
// The caller:
//  1. makes one Admission per process with New, then runs Start (it
//     returns once the webhook configurations, policies and namespaces are
//     cached);
//  2. calls Mutate and Validate per write (safe for concurrent use);
//  3. cancels Start's context to stop, which stops the informers.
//
// Example (the admission stage):
//
//	adm, err := kube.New(kube.Config{Store: env.Store})
//	...
//	res := adm.Mutate(ctx, &webhook.Request{Operation: webhook.Create, Kind: objects.Pods,
//		Namespace: ns, Name: name, Object: pod, User: user})
//	if !res.Allowed() { return reject(res.Status) }
package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/sync/errgroup"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	genericinitializer "k8s.io/apiserver/pkg/admission/initializer"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apiserver/pkg/util/proxy"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/storeclient"
	"github.com/podflow/podflow/services/webhook"
)

// ErrInvalidConfig is wrapped by Config.Validate.
var ErrInvalidConfig = errors.New("webhook/kube: invalid config")

// Config configures an Admission.
type Config struct {
	// Store is read for the webhook configurations, the policies and their
	// bindings and params, namespaces (namespaceSelector) and the
	// webhooks' Services and EndpointSlices. Required.
	Store *objects.Store
	// Authorize answers the `authorizer` of matchConditions and policies'
	// expressions. Nil: every check is denied.
	Authorize func(auth.Attributes) auth.Decision
	// ServiceResolver resolves a webhook's clientConfig.service to a URL.
	// Nil: a Ready endpoint of the Service, from the store.
	ServiceResolver webhookutil.ServiceResolver
	// CustomResources are the CustomResourceDefinitions the process
	// serves (crd.Catalog): a write of a custom resource is admitted in
	// the version of its request, converted between versions by its
	// definition. Nil: custom resources are admitted in the version they
	// are written in, and one stored in another version cannot be.
	CustomResources CustomResources
}

// Validate reports a Config that cannot work.
func (c Config) Validate() error {
	if c.Store == nil {
		return fmt.Errorf("%w: no Store", ErrInvalidConfig)
	}
	return nil
}

// Admission is the dynamic admission of one process.
type Admission struct {
	cfg        Config
	factory    *storeclient.Factory
	mutating   *mutating.Plugin
	validating *validating.Plugin
	policies   *validatingpolicy.Plugin
	ifaces     admission.ObjectInterfaces
	equiv      runtime.EquivalentResourceRegistry
	tracer     *sdktrace.TracerProvider
	calls      *callRecorder
	hooks      hookIndex // the configured webhooks' rules, for the fast path

	stop     chan struct{}
	stopOnce sync.Once
}

var (
	_ webhook.Admitter   = (*Admission)(nil)
	_ webhook.Revisioned = (*Admission)(nil)
)

// New returns an Admission over cfg.Store; Start it before use.
func New(cfg Config) (*Admission, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Admission{cfg: cfg, factory: storeclient.New(cfg.Store), stop: make(chan struct{}), equiv: runtime.NewEquivalentResourceRegistry()}
	// The configurations' informers are followed (WaitForConfigRevision).
	a.factory.Track(&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{},
		&admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{})
	a.calls = newCallRecorder()
	a.tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(a.calls), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	sc := legacyscheme.Scheme
	a.ifaces = &admission.RuntimeObjectInterfaces{ObjectCreater: sc, ObjectTyper: sc, ObjectDefaulter: sc, ObjectConvertor: sc, EquivalentResourceMapper: a.equiv}
	registerEquivalents(a.equiv)

	cs, err := storeclient.Clientset(cfg.Store)
	if err != nil {
		return nil, err
	}
	dyn, err := storeclient.Dynamic(cfg.Store)
	if err != nil {
		return nil, err
	}
	resolver := cfg.ServiceResolver
	if resolver == nil {
		slices, err := proxy.NewEndpointSliceIndexerGetter(a.factory.Discovery().V1().EndpointSlices())
		if err != nil {
			return nil, err
		}
		resolver = endpointResolver{services: a.factory.Core().V1().Services().Lister(), slices: slices}
	}
	authz := authorizer.AuthorizerFunc(func(ctx context.Context, at authorizer.Attributes) (authorizer.Decision, string, error) {
		if cfg.Authorize == nil {
			return authorizer.DecisionDeny, "podflow: no authorizer configured for admission", nil
		}
		var u *corev1.UserInfo
		if at.GetUser() != nil {
			u = &corev1.UserInfo{Username: at.GetUser().GetName(), Uid: at.GetUser().GetUID(), Groups: at.GetUser().GetGroups()}
		}
		d := cfg.Authorize(auth.Attributes{User: u, Verb: at.GetVerb(), Namespace: at.GetNamespace(), APIGroup: at.GetAPIGroup(),
			Resource: at.GetResource(), Subresource: at.GetSubresource(), Name: at.GetName()})
		if d.Allowed {
			return authorizer.DecisionAllow, d.Reason, nil
		}
		return authorizer.DecisionDeny, d.Reason, nil
	})
	init := genericinitializer.New(cs, dyn, a.factory, authz, utilfeature.DefaultFeatureGate, nil, a.stop, storeclient.NewRESTMapper())

	if a.mutating, err = mutating.NewMutatingWebhook(nil); err != nil {
		return nil, err
	}
	if a.validating, err = validating.NewValidatingAdmissionWebhook(nil); err != nil {
		return nil, err
	}
	if a.policies, err = validatingpolicy.NewPlugin(nil); err != nil {
		return nil, err
	}
	for _, w := range []interface {
		SetServiceResolver(webhookutil.ServiceResolver)
		SetAuthenticationInfoResolverWrapper(webhookutil.AuthenticationInfoResolverWrapper)
	}{a.mutating, a.validating} {
		w.SetServiceResolver(resolver)
		w.SetAuthenticationInfoResolverWrapper(observeCalls)
	}
	for _, p := range []admission.Interface{a.mutating, a.validating, a.policies} {
		init.Initialize(p)
		if err := admission.ValidateInitialization(p); err != nil {
			return nil, fmt.Errorf("webhook/kube: %w", err)
		}
	}
	a.hooks = newHookIndex(a.factory)
	return a, nil
}

// Start runs the informers and returns once the webhook configurations,
// policies and namespaces are cached; cancelling ctx stops them.
func (a *Admission) Start(ctx context.Context, g *errgroup.Group) error {
	a.factory.StartWithContext(ctx)
	g.Go(func() error {
		<-ctx.Done()
		a.stopOnce.Do(func() { close(a.stop) })
		a.factory.Shutdown()
		_ = a.tracer.Shutdown(context.WithoutCancel(ctx))
		return nil
	})
	res := a.factory.WaitForCacheSyncWithContext(ctx)
	if res.Err != nil {
		return fmt.Errorf("webhook/kube: caches: %w", res.Err)
	}
	// The plugins' readiness (their sources' first sync).
	deadline := time.Now().Add(30 * time.Second)
	for !(a.mutating.WaitForReady() && a.validating.WaitForReady() && a.policies.WaitForReady()) {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("webhook/kube: admission plugins not ready")
		}
	}
	return nil
}

// ConfigRevision implements webhook.Revisioned: the store revision the
// informers of the webhook configurations, the policies and their
// bindings have listed or watched up to.
func (a *Admission) ConfigRevision() int64 { return a.factory.Revision() }

// WaitForConfigRevision implements webhook.Revisioned: it returns once
// every change to the webhook configurations, policies and bindings up to
// store revision rev has reached the plugins' sources (the webhook
// configuration managers, the policy source's informers) and the listers,
// or with ctx's error. The policy source compiles what changed on its own
// refresh (kube-apiserver's: a second), as in Kubernetes.
func (a *Admission) WaitForConfigRevision(ctx context.Context, rev int64) error {
	return a.factory.WaitForRevision(ctx, rev)
}

// Mutate implements webhook.Admitter.
func (a *Admission) Mutate(ctx context.Context, r *webhook.Request) webhook.Result {
	res := webhook.Result{Object: r.Object}
	if !a.hooks.mayMatch(mutatingHooks, r) {
		return res
	}
	attrs, ifaces, err := a.attributes(r)
	if err != nil {
		res.Status = statusOf(err)
		return res
	}
	ctx, _, done := a.observe(ctx, &res, attrs)
	err = a.mutating.Admit(ctx, attrs, ifaces)
	if err == nil && attrs.GetReinvocationContext().ShouldReinvoke() && a.hooks.reinvocable() {
		// kube-apiserver's reinvocation: the in-tree plugins, then the
		// webhooks that asked for it, once more (with none asking, the
		// second pass would call no webhook).
		if r.Reinvoke != nil {
			err = a.reinvokeBuiltins(attrs, r)
		}
		if err == nil {
			attrs.GetReinvocationContext().SetIsReinvoke()
			err = a.mutating.Admit(ctx, attrs, ifaces)
		}
	}
	done(err)
	if err != nil {
		res.Status = statusOf(err)
		return res
	}
	if res.Object, err = fromAttrObject(attrs.GetObject(), r.Object); err != nil {
		res.Status = statusOf(err)
	}
	return res
}

// Validate implements webhook.Admitter: the policies, then the validating
// webhooks (kube-apiserver's order).
func (a *Admission) Validate(ctx context.Context, r *webhook.Request) webhook.Result {
	var res webhook.Result
	policies := a.hooks.mayMatch(policyHooks, r)
	webhooks := a.hooks.mayMatch(validatingHooks, r)
	if !policies && !webhooks {
		return res
	}
	attrs, ifaces, err := a.attributes(r)
	if err != nil {
		res.Status = statusOf(err)
		return res
	}
	ctx, w, done := a.observe(ctx, &res, attrs)
	if policies {
		start := time.Now()
		err = a.policies.Validate(ctx, attrs, ifaces)
		res.Calls = append(res.Calls, policyCalls(start, time.Since(start), err, w.snapshot(), attrs)...)
	}
	if err == nil && webhooks {
		err = a.validating.Validate(ctx, attrs, ifaces)
	}
	done(err)
	if err != nil {
		res.Status = statusOf(err)
	}
	return res
}

// observe prepares ctx for the plugins: a recorder of their warnings, and
// a root span of the in-process tracer that collects each webhook call's
// span. done(err) fills res.
func (a *Admission) observe(ctx context.Context, res *webhook.Result, attrs *recordingAttributes) (context.Context, *warnings, func(error)) {
	w := &warnings{}
	ctx = warning.WithWarningRecorder(ctx, w)
	ctx, span := a.tracer.Tracer("podflow.io/webhook").Start(ctx, "podflow admission")
	c := a.calls.collect(span.SpanContext().TraceID())
	return ctx, w, func(err error) {
		span.End()
		spans := a.calls.done(span.SpanContext().TraceID(), c)
		res.Calls = append(res.Calls, webhookCalls(spans, err, attrs)...)
		res.Warnings = append(res.Warnings, w.list...)
		res.AuditAnnotations = attrs.annotationMap()
	}
}

// warnings records the warnings the plugins add (warning.AddWarning).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) snapshot() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

func (w *warnings) AddWarning(_, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.list {
		if t == text {
			return
		}
	}
	w.list = append(w.list, text)
}

// attributes builds the plugins' view of r and the object interfaces
// they convert with. A custom resource is seen in the version of the
// request's object (the old object converted to it, as kube-apiserver's
// custom resource handler reads it), with its definition's converter.
func (a *Admission) attributes(r *webhook.Request) (*recordingAttributes, admission.ObjectInterfaces, error) {
	var obj, old runtime.Object
	var err error
	if r.Object != nil {
		if obj, err = toAttrObject(r.Object); err != nil {
			return nil, nil, err
		}
	}
	if r.OldObject != nil {
		if old, err = toAttrObject(r.OldObject); err != nil {
			return nil, nil, err
		}
	}
	gvk := schema.GroupVersionKind{Group: r.Kind.APIGroup, Version: r.Kind.Version, Kind: r.Kind.Name}
	gvr := schema.GroupVersionResource{Group: r.Kind.APIGroup, Version: r.Kind.Version, Resource: r.Kind.Resource}
	ifaces := a.ifaces
	if d := a.customResource(r.Kind, r.Object, r.OldObject); d != nil {
		ifaces = crInterfaces{d: d, equiv: a.equiv}
		for _, o := range []runtime.Object{obj, old} { // the request's version: its object's
			if u, ok := o.(*unstructured.Unstructured); ok && u != nil {
				gvk.Version, gvr.Version = u.GroupVersionKind().Version, u.GroupVersionKind().Version
				break
			}
		}
		if old != nil {
			if old, err = toVersion(d, old, gvk.Version); err != nil {
				return nil, nil, err
			}
		}
	}
	var opts runtime.Object
	switch r.Operation {
	case webhook.Create:
		opts = &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "CreateOptions"}}
	case webhook.Update:
		opts = &metav1.UpdateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "UpdateOptions"}}
	case webhook.Delete:
		opts = &metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "DeleteOptions"}}
	case webhook.Connect:
		if r.ConnectOptions == nil {
			return nil, nil, fmt.Errorf("webhook/kube: a CONNECT without options")
		}
		if gvk, err = kindOf(r.ConnectOptions); err != nil {
			return nil, nil, err
		}
		// The options are the object; a CONNECT has no operation options
		// (kube-apiserver's connect handler).
		if obj, err = toInternal(r.ConnectOptions, gvk); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, fmt.Errorf("webhook/kube: unknown operation %q", r.Operation)
	}
	if r.Subresource == "scale" {
		gvk = schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
	}
	if r.DryRun && opts != nil {
		setDryRun(opts)
	}
	var u user.Info = &user.DefaultInfo{} // never nil: the reviews dereference it
	if r.User != nil {
		u = &user.DefaultInfo{Name: r.User.GetUsername(), UID: r.User.GetUid(), Groups: r.User.GetGroups()}
	}
	rec := admission.NewAttributesRecord(obj, old, gvk, r.Namespace, r.Name, gvr, r.Subresource, admission.Operation(r.Operation), opts, r.DryRun, u)
	return &recordingAttributes{Attributes: rec}, ifaces, nil
}

func setDryRun(opts runtime.Object) {
	all := []string{metav1.DryRunAll}
	switch o := opts.(type) {
	case *metav1.CreateOptions:
		o.DryRun = all
	case *metav1.UpdateOptions:
		o.DryRun = all
	case *metav1.DeleteOptions:
		o.DryRun = all
	}
}

// reinvokeBuiltins runs r.Reinvoke over the object as the webhooks left it
// and puts its result back into attrs.
func (a *Admission) reinvokeBuiltins(attrs *recordingAttributes, r *webhook.Request) error {
	cur, err := fromAttrObject(attrs.GetObject(), r.Object)
	if err != nil {
		return err
	}
	next, st := r.Reinvoke(cur)
	if st != nil {
		return &statusError{st}
	}
	in, err := toAttrObject(next)
	if err != nil {
		return err
	}
	return replaceObject(attrs.GetObject(), in)
}

// recordingAttributes are admission attributes that keep the audit
// annotations the plugins add.
type recordingAttributes struct {
	admission.Attributes
	mu          sync.Mutex
	annotations map[string]string
}

func (r *recordingAttributes) AddAnnotation(key, value string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.annotations == nil {
		r.annotations = map[string]string{}
	}
	if v, ok := r.annotations[key]; ok && v != value {
		return fmt.Errorf("admission annotations are not allowed to be overwritten, key:%q, old value: %q, new value:%q", key, v, value)
	}
	r.annotations[key] = value
	return r.Attributes.AddAnnotation(key, value)
}

func (r *recordingAttributes) AddAnnotationWithLevel(key, value string, level auditinternal.Level) error {
	r.mu.Lock()
	if r.annotations == nil {
		r.annotations = map[string]string{}
	}
	r.annotations[key] = value
	r.mu.Unlock()
	return r.Attributes.AddAnnotationWithLevel(key, value, level)
}

func (r *recordingAttributes) annotationMap() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.annotations) == 0 {
		return nil
	}
	out := make(map[string]string, len(r.annotations))
	for k, v := range r.annotations {
		out[k] = v
	}
	return out
}

// statusError carries a podflow Status through the plugins' error path.
type statusError struct{ st *corev1.Status }

func (e *statusError) Error() string { return e.st.GetMessage() }

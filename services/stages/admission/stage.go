package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/webhook"
)

// Stage is one replica of the admission stage: it reads the pod's
// Namespace, ServiceAccount and PriorityClasses from informers over the
// store and its LimitRanges from the store itself (objects.FreshReads: a
// LimitRange written just before the pod applies to it), runs Admit, and publishes PodAdmitted or PodRejected (the seed's
// failure 2). Handling is a pure function of the event and the store's
// policy objects, so a redelivered event is admitted alike.
type Stage struct {
	env        stage.Env
	cfg        Config
	namespaces *informer.Informer[*corev1.Namespace]
	limits     *objects.FreshReads[*corev1.LimitRange] // from the store, not a cache
	priorities *informer.Informer[*corev1.PriorityClass]
	accounts   *informer.Informer[*corev1.ServiceAccount]
}

var _ stage.Starter = (*Stage)(nil)

// NewStage returns an admission stage replica.
func NewStage(env stage.Env, cfg Config) (*Stage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Stage{env: env, cfg: cfg}
	var err error
	if s.namespaces, err = informer.New[*corev1.Namespace](env.Store, "", informer.Handlers[*corev1.Namespace]{}); err != nil {
		return nil, err
	}
	s.limits = objects.NewFreshReads(func(ctx context.Context, ns string) ([]*corev1.LimitRange, error) {
		lrs, _, err := objects.List[*corev1.LimitRange](ctx, env.Store, ns)
		return lrs, err
	})
	if s.priorities, err = informer.New[*corev1.PriorityClass](env.Store, "", informer.Handlers[*corev1.PriorityClass]{}); err != nil {
		return nil, err
	}
	if s.accounts, err = informer.New[*corev1.ServiceAccount](env.Store, "", informer.Handlers[*corev1.ServiceAccount]{}); err != nil {
		return nil, err
	}
	return s, nil
}

// Start runs the informers and waits for their first list.
func (s *Stage) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(s.namespaces, s.priorities, s.accounts)
	return infs.Start(ctx, g)
}

// Handle admits one PodAuthorized.
func (s *Stage) Handle(ctx context.Context, d *bus.Delivery) error {
	in := d.Envelope.GetPodAuthorized()
	if in == nil {
		return bus.Permanent(fmt.Errorf("admission: unexpected event %s", d.Envelope.Type()))
	}
	ns := in.GetPod().GetMetadata().GetNamespace()
	nsObj, err := s.namespace(ctx, ns)
	if err != nil {
		return err
	}
	if nsObj == nil {
		st := stage.Failure(404, eventsv1.ReasonNotFound, "namespaces", ns, "namespaces %q not found", ns)
		return stage.Reject(ctx, s.env, d, st, in.GetReplyTo())
	}
	if nsObj.GetMetadata().GetDeletionTimestamp() != nil {
		st := stage.Failure(403, eventsv1.ReasonForbidden, "pods", in.GetPod().GetMetadata().GetName(),
			"pods %q is forbidden: unable to create new content in namespace %s because it is being terminated", in.GetPod().GetMetadata().GetName(), ns)
		return stage.Reject(ctx, s.env, d, st, in.GetReplyTo())
	}
	// The namespace's quotas are read while its LimitRanges are: both
	// reads start now, after the pod was asked for, and the pod waits for
	// the slower, not for their sum.
	quotas := s.readQuotas(ctx, ns, in.GetDryRun())
	sa, err := s.serviceAccount(ctx, in.GetPod())
	if err != nil {
		return err
	}
	limits, err := s.limits.Get(ctx, ns)
	if err != nil {
		return err
	}
	rc, err := s.runtimeClass(ctx, in.GetPod())
	if err != nil {
		return err
	}
	state := State{
		RuntimeClass:    rc,
		Namespace:       nsObj,
		ServiceAccount:  sa,
		LimitRanges:     limits,
		PriorityClasses: s.priorities.List(""),
		Config:          s.cfg,
	}
	var res Result
	var dyn dynamic
	// The delivery's pod is its own (a redelivery decodes its own copy):
	// admission mutates it in place.
	if s.cfg.Webhooks == nil {
		res = admitOwned(in.GetPod(), state)
	} else {
		if st, err := s.awaitConfigs(ctx, d, in); err != nil || st != nil {
			if err != nil {
				return err
			}
			return stage.Reject(ctx, s.env, d, st, in.GetReplyTo())
		}
		res, dyn = s.admitDynamic(ctx, d, in, state)
	}
	if !res.Allowed() {
		return s.reject(ctx, d, res.Status, in.GetReplyTo(), dyn.calls)
	}
	if in.GetDryRun() {
		st := stage.Success(201, "pods", res.Pod.GetMetadata().GetName())
		st.Warnings = dyn.warnings
		return stage.Reply(s.env, in.GetReplyTo(), st, res.Pod)
	}
	if s.cfg.Quota != nil {
		// kube's ResourceQuota plugin, the last validating admission: the
		// pod's usage is charged to the quotas (compare-and-swap) before
		// persistence stores it.
		if st := s.chargeQuota(ctx, in.GetUser(), res.Pod, quotas); st != nil {
			if st.GetCode() >= 500 {
				return fmt.Errorf("admission: %s", st.GetMessage()) // the store: retried
			}
			return stage.Reject(ctx, s.env, d, st, in.GetReplyTo())
		}
	}
	next := d.Next(&eventsv1.PodAdmitted{Pod: res.Pod, User: in.GetUser(), ReplyTo: in.GetReplyTo(), Mutations: res.Mutations,
		Calls: dyn.calls, Warnings: dyn.warnings})
	return s.env.Pub.Publish(ctx, next)
}

// awaitConfigs waits until the stage's webhook configurations and
// policies have reached the store revision the api stage's had reached
// when it accepted the pod (in.AdmissionRevision), so that a webhook
// registered before the pod's request — one the api process already
// calls — is called for it, as it would be by the one kube-apiserver that
// admits both. Past Config.WebhookConfigWait the pod is refused with 503
// ServiceUnavailable; a store error is returned (the event is retried).
// An event without the revision (from an older api stage) does not wait.
func (s *Stage) awaitConfigs(ctx context.Context, d *bus.Delivery, in *eventsv1.PodAuthorized) (*corev1.Status, error) {
	rev := in.GetAdmissionRevision()
	r, ok := s.cfg.Webhooks.(webhook.Revisioned)
	if rev == 0 || !ok {
		return nil, nil
	}
	wait := s.cfg.WebhookConfigWait
	if wait == 0 {
		wait = DefaultWebhookConfigWait
	}
	stop := s.keepAlive(ctx, d)
	defer stop()
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := r.WaitForConfigRevision(wctx, rev)
	switch {
	case err == nil:
		return nil, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		name := in.GetPod().GetMetadata().GetName()
		return stage.Failure(503, eventsv1.ReasonServiceUnavailable, "pods", name,
			"the admission webhook configurations have not reached revision %d in %s, so the webhooks registered before this request cannot be called yet: %v",
			rev, wait, err), nil
	default:
		return nil, fmt.Errorf("admission: webhook configurations at revision %d: %w", rev, err)
	}
}

// quotaRead is a read of a namespace's quotas under way (Stage.readQuotas).
type quotaRead struct {
	done   chan struct{}
	stored []objects.Object
	err    error
}

// readQuotas starts reading ns's quotas for chargeQuota when the stage
// charges quotas with a QuotaReader and the pod is not a dry run (which
// is not charged); nil otherwise.
func (s *Stage) readQuotas(ctx context.Context, ns string, dryRun bool) *quotaRead {
	qr, ok := s.cfg.Quota.(QuotaReader)
	if !ok || dryRun {
		return nil
	}
	r := &quotaRead{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.stored, r.err = qr.Read(ctx, ns)
	}()
	return r
}

// chargeQuota charges pod to its namespace's quotas, with the quotas of
// r when it was started.
func (s *Stage) chargeQuota(ctx context.Context, user *corev1.UserInfo, pod *corev1.Pod, r *quotaRead) *corev1.Status {
	if r == nil {
		return s.cfg.Quota.Admit(ctx, user, objects.Pods, "CREATE", pod, nil)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return stage.Internal(ctx.Err())
	}
	if r.err != nil {
		return stage.Internal(r.err)
	}
	return s.cfg.Quota.(QuotaReader).AdmitRead(ctx, user, objects.Pods, "CREATE", pod, nil, r.stored)
}

// dynamic is what the webhooks and policies said of a pod.
type dynamic struct {
	calls    []*eventsv1.AdmissionCall
	warnings []string
}

func (dy *dynamic) add(r webhook.Result) {
	for _, c := range r.Calls {
		dy.calls = append(dy.calls, &eventsv1.AdmissionCall{Plugin: c.Plugin, Name: c.Name, Configuration: c.Configuration,
			Start: timestamppb.New(c.Start), LatencyNanos: int64(c.Latency), Verdict: string(c.Verdict), Message: c.Message})
	}
	dy.warnings = append(dy.warnings, r.Warnings...)
}

// admitDynamic admits a pod with the webhooks and policies, in
// kube-apiserver's order: the built-in mutations (Mutate), the mutating
// webhooks (reinvoking the built-ins when a webhook asks for it), the
// built-ins once more over what the webhooks changed (defaults for an
// injected container, its QoS class) and validation (Admit), then the
// policies and the validating webhooks.
func (s *Stage) admitDynamic(ctx context.Context, d *bus.Delivery, in *eventsv1.PodAuthorized, state State) (Result, dynamic) {
	var dyn dynamic
	res := mutateOwned(in.GetPod(), state)
	if !res.Allowed() {
		return res, dyn
	}
	stop := s.keepAlive(ctx, d)
	defer stop()
	md := res.Pod.GetMetadata()
	req := &webhook.Request{Operation: webhook.Create, Kind: objects.Pods, Namespace: md.GetNamespace(), Name: md.GetName(),
		Object: res.Pod, DryRun: in.GetDryRun(), User: in.GetUser(),
		Reinvoke: func(o objects.Object) (objects.Object, *corev1.Status) {
			r := Mutate(o.(*corev1.Pod), state)
			return r.Pod, r.Status
		}}
	mut := s.cfg.Webhooks.Mutate(ctx, req)
	dyn.add(mut)
	if !mut.Allowed() {
		return Result{Pod: res.Pod, Status: mut.Status}, dyn
	}
	mutations := res.Mutations
	for _, c := range mut.Calls {
		if c.Verdict == webhook.Patched {
			mutations = append(mutations, fmt.Sprintf("webhook %s", c.Name))
		}
	}
	pod, ok := mut.Object.(*corev1.Pod)
	if !ok {
		return Result{Pod: res.Pod, Status: stage.Internal(fmt.Errorf("admission: the webhooks returned a %T", mut.Object))}, dyn
	}
	res = Admit(pod, state)
	res.Mutations = append(mutations, res.Mutations...)
	if !res.Allowed() {
		return res, dyn
	}
	req.Object, req.Reinvoke = res.Pod, nil
	val := s.cfg.Webhooks.Validate(ctx, req)
	dyn.add(val)
	res.Status = val.Status
	return res, dyn
}

// keepAlive tells the bus the delivery is still being handled while the
// webhooks are called (each may take up to 30 s, past the consumer's
// AckWait), until the returned stop is called.
func (s *Stage) keepAlive(ctx context.Context, d *bus.Delivery) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(keepAliveEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				_ = d.InProgress()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// keepAliveEvery is how often a delivery waiting on webhooks is reported
// in progress: well inside the consumer's AckWait (30 s).
const keepAliveEvery = 5 * time.Second

// reject publishes PodRejected, with the admission calls made, and
// answers the requester.
func (s *Stage) reject(ctx context.Context, d *bus.Delivery, st *corev1.Status, replyTo string, calls []*eventsv1.AdmissionCall) error {
	if len(calls) == 0 {
		return stage.Reject(ctx, s.env, d, st, replyTo)
	}
	if err := s.env.Pub.Publish(ctx, d.Next(&eventsv1.PodRejected{Status: st, ReplyTo: replyTo, Calls: calls})); err != nil {
		return err
	}
	return stage.Reply(s.env, replyTo, st, nil)
}

// namespace returns the pod's Namespace from the informer, or from a
// linearizable read when the informer has not seen it yet (just created).
func (s *Stage) namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	if ns, ok := s.namespaces.Get("", name); ok {
		return ns, nil
	}
	ns, err := objects.Get[*corev1.Namespace](ctx, s.env.Store, "", name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, nil
	}
	return ns, err
}

// runtimeClass returns the RuntimeClass the pod names, read from the
// store (a linearizable read, so a class just created or deleted is
// seen, as kube's plugin looks a lister miss up live); nil when it names
// none or there is none by that name.
func (s *Stage) runtimeClass(ctx context.Context, pod *corev1.Pod) (*RuntimeClass, error) {
	name := pod.GetSpec().GetRuntimeClassName()
	if name == "" {
		return nil, nil
	}
	obj, err := s.env.Store.GetKind(ctx, objects.RuntimeClasses, "", name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	u, ok := obj.(*corev1.Unstructured)
	if !ok {
		return nil, fmt.Errorf("admission: RuntimeClass %q is stored as %T", name, obj)
	}
	return RuntimeClassFromStore(u)
}

// serviceAccount returns the pod's ServiceAccount, for its
// imagePullSecrets and its token: from the informer, or, when the
// informer has not seen it (just created, or there is none), from a
// linearizable read, as Kubernetes' plugin looks a cache miss up live.
func (s *Stage) serviceAccount(ctx context.Context, pod *corev1.Pod) (*corev1.ServiceAccount, error) {
	ns, name := pod.GetMetadata().GetNamespace(), pod.GetSpec().GetServiceAccountName()
	if name == "" {
		name = DefaultServiceAccount
	}
	if sa, ok := s.accounts.Get(ns, name); ok {
		return sa, nil
	}
	sa, err := objects.Get[*corev1.ServiceAccount](ctx, s.env.Store, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, nil
	}
	return sa, err
}

package admission

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// Stage is one replica of the admission stage: it reads the pod's
// Namespace, ServiceAccount and SidecarPolicies from informers over the
// store and its LimitRanges from the store itself (freshReads: a
// LimitRange written just before the pod applies to it), runs Admit, and publishes PodAdmitted or PodRejected (the seed's
// failure 2). Handling is a pure function of the event and the store's
// policy objects, so a redelivered event is admitted alike.
type Stage struct {
	env        stage.Env
	cfg        Config
	namespaces *informer.Informer[*corev1.Namespace]
	limits     *freshReads[*corev1.LimitRange] // from the store, not a cache
	sidecars   *informer.Informer[*corev1.SidecarPolicy]
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
	s.limits = newFreshReads(func(ctx context.Context, ns string) ([]*corev1.LimitRange, error) {
		lrs, _, err := objects.List[*corev1.LimitRange](ctx, env.Store, ns)
		return lrs, err
	})
	if s.sidecars, err = informer.New[*corev1.SidecarPolicy](env.Store, "", informer.Handlers[*corev1.SidecarPolicy]{}); err != nil {
		return nil, err
	}
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
	infs.Add(s.namespaces, s.sidecars, s.priorities, s.accounts)
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
	sa, err := s.serviceAccount(ctx, in.GetPod())
	if err != nil {
		return err
	}
	limits, err := s.limits.get(ctx, ns)
	if err != nil {
		return err
	}
	res := Admit(in.GetPod(), State{
		Namespace:       nsObj,
		ServiceAccount:  sa,
		LimitRanges:     limits,
		SidecarPolicies: s.sidecars.List(ns),
		PriorityClasses: s.priorities.List(""),
		Config:          s.cfg,
	})
	if !res.Allowed() {
		return stage.Reject(ctx, s.env, d, res.Status, in.GetReplyTo())
	}
	if in.GetDryRun() {
		return stage.Reply(s.env, in.GetReplyTo(), stage.Success(201, "pods", res.Pod.GetMetadata().GetName()), res.Pod)
	}
	next := d.Next(&eventsv1.PodAdmitted{Pod: res.Pod, User: in.GetUser(), ReplyTo: in.GetReplyTo(), Mutations: res.Mutations})
	return s.env.Pub.Publish(ctx, next)
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

// serviceAccount returns the pod's ServiceAccount, for its
// imagePullSecrets: from the informer, or, when the informer has not seen
// it (just created, or there is none), from a linearizable read, as
// Kubernetes' plugin looks a cache miss up live. A pod with its own
// imagePullSecrets needs none (nil).
func (s *Stage) serviceAccount(ctx context.Context, pod *corev1.Pod) (*corev1.ServiceAccount, error) {
	if len(pod.GetSpec().GetImagePullSecrets()) > 0 {
		return nil, nil
	}
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

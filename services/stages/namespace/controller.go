package namespace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// The namespace conditions the controller maintains, with Kubernetes'
// reasons and messages (kube-controller-manager's namespace deleter).
const (
	ConditionContentFailure      = "NamespaceDeletionContentFailure"
	ConditionContentRemaining    = "NamespaceContentRemaining"
	ConditionFinalizersRemaining = "NamespaceFinalizersRemaining"
)

// Config configures a Controller.
type Config struct {
	// RetryInterval is how long a namespace whose content is not all gone
	// (pods still terminating on their nodes, a failed delete) waits
	// before the next pass. Default 1s.
	RetryInterval time.Duration
	// DeletionGrace is how long after its deletion a namespace's content
	// is left alone, kube-controller-manager's namespaceDeletionGracePeriod
	// (5s): the deletes of the client that deleted the namespace (kubectl
	// delete -k: the namespace first, then what is in it) find their
	// objects there, as with kube-apiserver, instead of a NotFound. 0: no
	// wait. Default 5s.
	DeletionGrace time.Duration
	// ServiceIPs, when set, deletes a terminating namespace's Services
	// with their ClusterIPs (the api stage's allocator: the same service
	// CIDR). Nil: a Service is deleted as any other object, at its
	// revision. Pods always take the graceful path (stage.DeletePod).
	ServiceIPs *ipalloc.Allocator
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{RetryInterval: time.Second, DeletionGrace: 5 * time.Second}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.RetryInterval <= 0 {
		return fmt.Errorf("namespace: RetryInterval (%s) must be positive", c.RetryInterval)
	}
	if c.DeletionGrace < 0 {
		return fmt.Errorf("namespace: DeletionGrace (%s) must not be negative", c.DeletionGrace)
	}
	return nil
}

// Controller is kube-controller-manager's namespace controller: it
// empties every namespace being terminated, then removes it. Every step
// is a compare-and-swap write derived from what the store holds, so a
// pass interrupted anywhere (a crash, a lost leader) is finished by the
// next one, on this replica or another, and several replicas may run it
// at once.
type Controller struct {
	env stage.Env
	cfg Config
	inf *informer.Informer[*corev1.Namespace]
	now func() time.Time

	mu      sync.Mutex
	pending map[string]bool
	wake    chan struct{}
}

// New returns a Controller over env's store and publisher.
func New(env stage.Env, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{env: env, cfg: cfg, now: time.Now, pending: map[string]bool{}, wake: make(chan struct{}, 1)}
	enqueue := func(ns *corev1.Namespace) {
		if ns.GetMetadata().GetDeletionTimestamp() != nil {
			c.Enqueue(ns.GetMetadata().GetName())
		}
	}
	inf, err := informer.New[*corev1.Namespace](env.Store, "", informer.Handlers[*corev1.Namespace]{
		OnAdd:    enqueue,
		OnUpdate: func(_, ns *corev1.Namespace) { enqueue(ns) },
	})
	if err != nil {
		return nil, err
	}
	c.inf = inf
	return c, nil
}

// Content lists the kinds a namespace's content is made of: every
// namespaced kind of the registry (objects.Kinds), pods first (their
// termination takes longest), Events last (deleting pods records some).
func Content() []objects.Kind {
	var out []objects.Kind
	for _, k := range objects.Kinds() {
		if k.Namespaced {
			out = append(out, k)
		}
	}
	rank := func(k objects.Kind) int {
		switch k.Name {
		case objects.Pods.Name:
			return 0
		case objects.Events.Name:
			return 2
		}
		return 1
	}
	slices.SortStableFunc(out, func(a, b objects.Kind) int { return rank(a) - rank(b) })
	return out
}

// Start runs the namespace informer and the controller's worker on g,
// both stopped by ctx; it returns once the informer is synced (every
// namespace already terminating is then queued: a restart resumes them).
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.inf)
	if err := infs.Start(ctx, g); err != nil {
		return err
	}
	g.Go(func() error { return c.run(ctx) })
	return nil
}

// Enqueue asks for a pass over the namespace name (a no-op for one not
// being deleted). It never blocks.
func (c *Controller) Enqueue(name string) {
	c.mu.Lock()
	c.pending[name] = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Controller) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.pending))
	for n := range c.pending {
		out = append(out, n)
	}
	clear(c.pending)
	slices.Sort(out)
	return out
}

// run is the worker: one pass per queued namespace; a namespace that is
// not finished is passed over again after RetryInterval.
func (c *Controller) run(ctx context.Context) error {
	retry := map[string]bool{}
	for {
		var tick <-chan time.Time
		var timer *time.Timer
		if len(retry) > 0 {
			timer = time.NewTimer(c.cfg.RetryInterval)
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case <-c.wake:
		case <-tick:
			for n := range retry {
				c.Enqueue(n)
			}
		}
		if timer != nil {
			timer.Stop()
		}
		for _, name := range c.take() {
			done, err := c.Sync(ctx, name)
			if err != nil && ctx.Err() == nil && c.env.Log != nil {
				c.env.Log.Warn("namespace deletion: pass failed", "namespace", name, "err", err)
			}
			if done && err == nil {
				delete(retry, name)
			} else {
				retry[name] = true
			}
		}
	}
}

// Reconcile queues every namespace being deleted (the level-triggered
// half: a namespace whose update this replica missed is found here).
func (c *Controller) Reconcile(context.Context) error {
	for _, ns := range c.inf.List("") {
		if ns.GetMetadata().GetDeletionTimestamp() != nil {
			c.Enqueue(ns.GetMetadata().GetName())
		}
	}
	return nil
}

// Sync makes one pass over the namespace name, kube-controller-manager's
// namespace deleter: phase Terminating; every object of every namespaced
// kind deleted (pods gracefully, and first: nothing else while one
// remains); the conditions set from what remains;
// once nothing does, the "kubernetes" finalizer removed and the namespace
// with it. done is true when there is nothing left to do (the namespace
// is gone, or is not being deleted).
func (c *Controller) Sync(ctx context.Context, name string) (done bool, err error) {
	ns, err := nslifecycle.Get(ctx, c.env.Store, name)
	if err != nil || ns == nil {
		return ns == nil && err == nil, err
	}
	if ns.GetMetadata().GetDeletionTimestamp() == nil {
		return true, nil
	}
	uid := ns.GetMetadata().GetUid()
	if ns.GetStatus().GetPhase() != nslifecycle.PhaseTerminating {
		if ns, err = c.mutate(ctx, name, uid, func(ns *corev1.Namespace) error {
			if ns.GetStatus().GetPhase() == nslifecycle.PhaseTerminating {
				return objects.ErrNoChange
			}
			if ns.Status == nil {
				ns.Status = &corev1.NamespaceStatus{}
			}
			ns.Status.Phase = nslifecycle.PhaseTerminating
			return nil
		}); err != nil || ns == nil {
			return ns == nil && err == nil, err
		}
	}
	if len(ns.GetSpec().GetFinalizers()) == 0 {
		return c.remove(ctx, ns)
	}
	if !slices.Contains(ns.GetSpec().GetFinalizers(), nslifecycle.FinalizerKubernetes) {
		return false, nil // another finalizer's owner has work left
	}
	if c.now().Sub(ns.GetMetadata().GetDeletionTimestamp().AsTime()) < c.cfg.DeletionGrace {
		return false, nil // kube's grace: the next pass, after RetryInterval
	}
	remaining, failures := c.deleteContent(ctx, name)
	if ns, err = c.mutate(ctx, name, uid, func(ns *corev1.Namespace) error {
		if !setConditions(ns, conditions(remaining, failures), c.now()) {
			return objects.ErrNoChange
		}
		return nil
	}); err != nil || ns == nil {
		return ns == nil && err == nil, err
	}
	if len(failures) > 0 {
		return false, errors.Join(failures...)
	}
	if len(remaining) > 0 {
		return false, nil
	}
	if ns, err = c.mutate(ctx, name, uid, func(ns *corev1.Namespace) error {
		if !slices.Contains(ns.GetSpec().GetFinalizers(), nslifecycle.FinalizerKubernetes) {
			return objects.ErrNoChange
		}
		ns.Spec.Finalizers = slices.DeleteFunc(ns.Spec.Finalizers, func(f string) bool { return f == nslifecycle.FinalizerKubernetes })
		return nil
	}); err != nil || ns == nil {
		return ns == nil && err == nil, err
	}
	if len(ns.GetSpec().GetFinalizers()) > 0 {
		return false, nil
	}
	return c.remove(ctx, ns)
}

// errGone ends a mutate whose namespace was replaced by a new one of the
// same name (another uid): that one is not being deleted by this pass.
var errGone = errors.New("namespace: recreated")

// mutate is objects.Mutate of the namespace of uid; nil when it is gone
// (or is another namespace now).
func (c *Controller) mutate(ctx context.Context, name, uid string, f func(*corev1.Namespace) error) (*corev1.Namespace, error) {
	ns, err := objects.Mutate(ctx, c.env.Store, "", name, func(ns *corev1.Namespace) error {
		if ns.GetMetadata().GetUid() != uid {
			return errGone
		}
		return f(ns)
	})
	if errors.Is(err, raftstore.ErrNotFound) || errors.Is(err, errGone) {
		return nil, nil
	}
	return ns, err
}

// remove deletes the finalized namespace at the revision it was read at
// (a namespace that changed since is looked at again).
func (c *Controller) remove(ctx context.Context, ns *corev1.Namespace) (bool, error) {
	_, err := c.env.Store.Delete(ctx, objects.Namespaces, "", ns.GetMetadata().GetName(), objects.Revision(ns))
	switch {
	case err == nil, errors.Is(err, raftstore.ErrNotFound):
		return true, nil
	case errors.Is(err, raftstore.ErrConflict):
		return false, nil
	}
	return false, err
}

// remainder is what one kind still has in the namespace after a pass.
type remainder struct {
	kind       objects.Kind
	count      int
	finalizers map[string]int // finalizer -> objects carrying it
}

// deleteContent deletes every object of every content kind in the
// namespace and counts what is still there afterwards (pods terminating
// on their nodes, objects written meanwhile). Pods go first, and while
// any remains nothing else is deleted (kube-controller-manager's
// OrderedNamespaceDeletion, on by default since 1.34: a pod's volumes,
// Secrets, ConfigMaps and NetworkPolicies outlive it).
func (c *Controller) deleteContent(ctx context.Context, ns string) (remaining []remainder, failures []error) {
	for _, k := range Content() { // kinds registered since start too
		if k.Name != objects.Pods.Name && slices.ContainsFunc(remaining, func(r remainder) bool { return r.kind.Name == objects.Pods.Name }) {
			return remaining, failures // the next pass, once the pods are gone
		}
		items, err := c.list(ctx, k, ns)
		if err != nil {
			failures = append(failures, err)
			continue
		}
		if len(items) == 0 {
			continue
		}
		for _, obj := range items {
			if err := c.deleteOne(ctx, k, obj); err != nil {
				failures = append(failures, fmt.Errorf("delete %s %s/%s: %w", k.Resource, ns, obj.GetMetadata().GetName(), err))
			}
		}
		left, err := c.list(ctx, k, ns)
		if err != nil {
			failures = append(failures, err)
			continue
		}
		if len(left) > 0 {
			r := remainder{kind: k, count: len(left), finalizers: map[string]int{}}
			for _, o := range left {
				for _, f := range o.GetMetadata().GetFinalizers() {
					r.finalizers[f]++
				}
			}
			remaining = append(remaining, r)
		}
	}
	return remaining, failures
}

// deleteOne deletes one object: a pod gracefully (marked terminating and
// handed to its node; an unbound one removed at once), a pod already
// terminating on a node left to that node's agent, anything else with
// Config.Delete.
func (c *Controller) deleteOne(ctx context.Context, k objects.Kind, obj objects.Object) error {
	var err error
	switch pod, isPod := obj.(*corev1.Pod); {
	case isPod && pod.GetMetadata().GetDeletionTimestamp() == nil:
		_, err = stage.DeletePod(ctx, c.env, pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), nil)
	case isPod && pod.GetSpec().GetNodeName() == "":
		err = stage.RequestDeletion(ctx, c.env, pod)
	case isPod:
		return nil // its node is stopping it; the status stage removes it after
	case c.cfg.ServiceIPs != nil && k.Name == objects.Services.Name:
		_, err = c.cfg.ServiceIPs.Delete(ctx, c.env.Store, obj.(*corev1.Service))
	default:
		md := obj.GetMetadata()
		_, err = c.env.Store.Delete(ctx, k, md.GetNamespace(), md.GetName(), objects.Revision(obj))
	}
	if errors.Is(err, raftstore.ErrNotFound) || errors.Is(err, raftstore.ErrConflict) {
		return nil // gone, or changed: the recount and the next pass tell
	}
	return err
}

// list reads every object of kind k in namespace ns.
func (c *Controller) list(ctx context.Context, k objects.Kind, ns string) ([]objects.Object, error) {
	kvs, _, err := c.env.Store.KV().List(ctx, k.Prefix(ns))
	if err != nil {
		return nil, fmt.Errorf("list %s in %s: %w", k.Resource, ns, err)
	}
	out := make([]objects.Object, 0, len(kvs))
	for _, kv := range kvs {
		obj := k.New()
		if err := objects.Decode(kv, obj); err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

// conditions are the namespace conditions of a pass that left remaining
// and failed with failures, worded as Kubernetes' namespace deleter.
func conditions(remaining []remainder, failures []error) []*corev1.NamespaceCondition {
	cond := func(typ string, bad bool, badReason, badMsg, okReason, okMsg string) *corev1.NamespaceCondition {
		if bad {
			return &corev1.NamespaceCondition{Type: typ, Status: "True", Reason: badReason, Message: badMsg}
		}
		return &corev1.NamespaceCondition{Type: typ, Status: "False", Reason: okReason, Message: okMsg}
	}
	var errs, left, fins []string
	for _, err := range failures {
		errs = append(errs, err.Error())
	}
	finCount := map[string]int{}
	for _, r := range remaining {
		left = append(left, fmt.Sprintf("%s.%s has %d resource instances", r.kind.Resource, r.kind.APIGroup, r.count))
		for f, n := range r.finalizers {
			finCount[f] += n
		}
	}
	for _, f := range slices.Sorted(maps.Keys(finCount)) {
		fins = append(fins, fmt.Sprintf("%s in %d resource instances", f, finCount[f]))
	}
	return []*corev1.NamespaceCondition{
		cond(ConditionContentFailure, len(errs) > 0, "ContentDeletionFailed",
			fmt.Sprintf("Failed to delete all resource types, %d remaining: %s", len(errs), strings.Join(errs, ", ")),
			"ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
		cond(ConditionContentRemaining, len(left) > 0, "SomeResourcesRemain",
			"Some resources are remaining: "+strings.Join(left, ", "),
			"ContentRemoved", "All content successfully removed"),
		cond(ConditionFinalizersRemaining, len(fins) > 0, "SomeFinalizersRemain",
			"Some content in the namespace has finalizers remaining: "+strings.Join(fins, ", "),
			"ContentHasNoFinalizers", "All content-preserving finalizers finished"),
	}
}

// setConditions puts want into ns's status, keeping a condition's
// lastTransitionTime while its status stays; it reports whether anything
// changed (a pass that finds the same state writes nothing).
func setConditions(ns *corev1.Namespace, want []*corev1.NamespaceCondition, now time.Time) bool {
	if ns.Status == nil {
		ns.Status = &corev1.NamespaceStatus{}
	}
	changed := false
	for _, w := range want {
		i := slices.IndexFunc(ns.Status.Conditions, func(c *corev1.NamespaceCondition) bool { return c.GetType() == w.GetType() })
		if i < 0 {
			w.LastTransitionTime = timestamppb.New(now)
			ns.Status.Conditions = append(ns.Status.Conditions, w)
			changed = true
			continue
		}
		old := ns.Status.Conditions[i]
		w.LastTransitionTime = old.GetLastTransitionTime()
		if old.GetStatus() != w.GetStatus() {
			w.LastTransitionTime = timestamppb.New(now)
		}
		if !proto.Equal(old, w) {
			ns.Status.Conditions[i] = w
			changed = true
		}
	}
	return changed
}

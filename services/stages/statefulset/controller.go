package statefulset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"golang.org/x/sync/errgroup"
	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kubecontroller "k8s.io/kubernetes/pkg/controller"
	kubests "k8s.io/kubernetes/pkg/controller/statefulset"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/registry"
	"github.com/podflow/podflow/services/stage"
)

// controllerKind is the kind of the controller's objects (kube's).
var controllerKind = apps.SchemeGroupVersion.WithKind("StatefulSet")

// Config configures the controller.
type Config struct {
	// Controller configures the replica's Runner (work queue, Leases).
	Controller controller.Config
}

// DefaultConfig returns the defaults for a replica of the stage.
func DefaultConfig(replica string) Config {
	return Config{Controller: controller.DefaultConfig(pipeline.StatefulSet, replica)}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.Controller.Stage != pipeline.StatefulSet {
		return fmt.Errorf("statefulset: stage %q is not %s", c.Controller.Stage, pipeline.StatefulSet)
	}
	return c.Controller.Validate()
}

// Controller is one replica of the StatefulSet controller stage: kube's
// StatefulSetController's informer handlers and sync over kube's own
// StatefulSetControl (control), whose pod, status, history and event
// writes go to podflow's store and pipeline (client.go).
type Controller struct {
	env    stage.Env
	cfg    Config
	runner *controller.Runner
	reg    *registry.Registry
	pods   *controller.Pods
	sets   *informer.Informer[*corev1.Unstructured]
	revs   *informer.Informer[*corev1.Unstructured]
	podInf *informer.Informer[*corev1.Pod]
	// lazy runs podInf only while there is a StatefulSet: kube's pod
	// handlers drop a pod no StatefulSet controls or selects.
	lazy   *informer.Lazy
	events *controller.Events
	log    *slog.Logger

	control kubests.StatefulSetControlInterface

	statefulSets controller.DecodeCache[*apps.StatefulSet]
	revisions    controller.DecodeCache[*apps.ControllerRevision]
}

var (
	_ stage.Handler    = (*Controller)(nil)
	_ stage.Starter    = (*Controller)(nil)
	_ stage.Reconciler = (*Controller)(nil)
)

// New returns a replica of the controller acting with env's identity; req
// carries its pod requests to the api stage (controller.NATSRequester).
func New(env stage.Env, cfg Config, req controller.Requester) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Controller.Log == nil {
		cfg.Controller.Log = log
	}
	c := &Controller{env: env, cfg: cfg, reg: registry.Default(), pods: controller.NewPods(env, req), log: log}
	c.events = &controller.Events{Recorder: &events.Recorder{Store: env.Store, Component: "statefulset-controller", Instance: env.Replica}}
	rec := recorder{c}
	c.control = kubests.NewDefaultStatefulSetControl(kubests.NewStatefulPodControlFromManager(podManager{c}, rec), statusUpdater{c}, history{c})
	var err error
	if c.runner, err = controller.New(env.Store, cfg.Controller, c.sync, c.keys); err != nil {
		return nil, err
	}
	if c.sets, err = informer.NewKind(env.Store, objects.StatefulSets, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			c.runner.Add(keyOf(u.GetMetadata()))
		},
		OnUpdate: func(_, u *corev1.Unstructured) { c.runner.Add(keyOf(u.GetMetadata())) },
		OnDelete: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			key := keyOf(u.GetMetadata())
			c.statefulSets.Forget(key)
			for _, k := range expectKinds {
				c.runner.Forget(expectKey(key, k))
			}
		},
	}); err != nil {
		return nil, err
	}
	if c.revs, err = informer.NewKind(env.Store, objects.ControllerRevisions, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd:    func(u *corev1.Unstructured) { c.revisionChanged(u) },
		OnUpdate: func(_, u *corev1.Unstructured) { c.revisionChanged(u) },
		OnDelete: func(u *corev1.Unstructured) {
			c.revisionChanged(u)
			c.revisions.Forget(keyOf(u.GetMetadata()))
		},
	}); err != nil {
		return nil, err
	}
	if c.podInf, err = controller.NewPodInformer(env.Store, controllerKind.Kind, informer.Handlers[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod) { c.podChanged(nil, p) },
		OnUpdate: func(old, p *corev1.Pod) { c.podChanged(old, p) },
		OnDelete: func(p *corev1.Pod) { c.podChanged(p, nil) },
	}); err != nil {
		return nil, err
	}
	if c.lazy, err = c.runner.LazyPods(c.podInf, func() bool { return c.sets.Len() > 0 }, c.sets); err != nil {
		return nil, err
	}
	return c, nil
}

func keyOf(md *corev1.ObjectMeta) string { return controller.Key(md.GetNamespace(), md.GetName()) }

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("statefulset: the controller consumes no events"))
}

// Start runs the informers, the Lease and the workers on g; it returns
// once the informers are synced.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.sets, c.revs, c.lazy)
	return c.runner.Start(ctx, g, &infs)
}

// Reconcile queues every StatefulSet.
func (c *Controller) Reconcile(ctx context.Context) error { return c.runner.Reconcile(ctx) }

// Runner is the replica's Runner (tests read its Members).
func (c *Controller) Runner() *controller.Runner { return c.runner }

func (c *Controller) keys() []string { return controller.InformerKeys(c.sets) }

// baseCtx is Start's context (Background before Start): Events and the
// history's writes run under it.
func (c *Controller) baseCtx() context.Context { return c.runner.Context() }

// decodeSet returns u as a StatefulSet, decoded once per revision
// (shared: the caller copies before it changes it); nil when it does not
// decode.
func (c *Controller) decodeSet(u *corev1.Unstructured) *apps.StatefulSet {
	return decode(c, &c.statefulSets, "StatefulSet", u)
}

// decodeRevision is decodeSet for a ControllerRevision.
func (c *Controller) decodeRevision(u *corev1.Unstructured) *apps.ControllerRevision {
	return decode(c, &c.revisions, "ControllerRevision", u)
}

// decode returns u decoded into a new T through cache; nil when it does
// not decode.
func decode[T any, P interface {
	*T
	runtime.Object
}](c *Controller, cache *controller.DecodeCache[P], kind string, u *corev1.Unstructured) P {
	key := keyOf(u.GetMetadata())
	obj, err := cache.Decode(key, objects.Revision(u), func() (P, error) {
		obj := P(new(T))
		return obj, fromStored(u, obj)
	})
	if err != nil {
		c.log.Warn("undecodable "+kind, "key", key, "err", err)
		return nil
	}
	return obj
}

// set returns StatefulSet ns/name from the informer.
func (c *Controller) set(ns, name string) *apps.StatefulSet {
	u, ok := c.sets.Get(ns, name)
	if !ok {
		return nil
	}
	return c.decodeSet(u)
}

// resolveControllerRef is kube's: the StatefulSet ref names, if it still
// has ref's uid.
func (c *Controller) resolveControllerRef(ns string, ref *corev1.OwnerReference) *apps.StatefulSet {
	if ref.GetKind() != controllerKind.Kind {
		return nil
	}
	s := c.set(ns, ref.GetName())
	if s == nil || string(s.UID) != ref.GetUid() {
		return nil
	}
	return s
}

func (c *Controller) enqueue(s *apps.StatefulSet) { c.runner.Add(controller.Key(s.Namespace, s.Name)) }

// revisionChanged queues the StatefulSet controlling a ControllerRevision
// (kube's controller watches them only through its own lists; a change by
// someone else is healed here rather than at the next resync).
func (c *Controller) revisionChanged(u *corev1.Unstructured) {
	if ref := controller.ControllerOf(u.GetMetadata()); ref != nil {
		if s := c.resolveControllerRef(u.GetMetadata().GetNamespace(), ref); s != nil {
			c.enqueue(s)
		}
	}
}

// podChanged queues the StatefulSets a pod change concerns, as kube's
// addPod, updatePod and deletePod: its controller's (before and after),
// and for an orphan every StatefulSet of its namespace whose selector
// matches it; a pod that became Ready is looked at again after the set's
// minReadySeconds.
func (c *Controller) podChanged(old, p *corev1.Pod) {
	for _, q := range []*corev1.Pod{old, p} {
		if q == nil {
			continue
		}
		md := q.GetMetadata()
		if ref := controller.ControllerOf(md); ref != nil {
			s := c.resolveControllerRef(md.GetNamespace(), ref)
			if s == nil {
				continue
			}
			c.enqueue(s)
			if old != nil && p == q && s.Spec.MinReadySeconds > 0 && !podReady(old) && podReady(p) {
				c.runner.AddAfter(controller.Key(s.Namespace, s.Name), time.Duration(s.Spec.MinReadySeconds)*time.Second)
			}
			continue
		}
		if md.GetDeletionTimestamp() != nil {
			continue
		}
		for _, s := range c.setsForPod(q) {
			c.enqueue(s)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.GetStatus().GetConditions() {
		if cond.GetType() == string(v1.PodReady) {
			return cond.GetStatus() == string(v1.ConditionTrue)
		}
	}
	return false
}

// setsForPod is kube's GetPodStatefulSets: the StatefulSets of the pod's
// namespace whose selector matches its labels.
func (c *Controller) setsForPod(p *corev1.Pod) []*apps.StatefulSet {
	md := p.GetMetadata()
	if len(md.GetLabels()) == 0 {
		return nil
	}
	var out []*apps.StatefulSet
	for _, u := range c.sets.List(md.GetNamespace()) {
		s := c.decodeSet(u)
		if s == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(md.GetLabels())) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// expectKinds are the informers a sync's writes are expected in.
var expectKinds = []objects.Kind{objects.StatefulSets, objects.ControllerRevisions, objects.Pods}

// expectKey is the Runner key of key's expectation of kind k's informer.
func expectKey(key string, k objects.Kind) string { return k.Resource + "#" + key }

// expect records that StatefulSet key waits for the informer of kind k
// to reach rev before it is synced again.
func (c *Controller) expect(key string, k objects.Kind, rev int64) {
	if rev > 0 {
		c.runner.Expect(expectKey(key, k), rev)
	}
}

// satisfied reports whether every informer shows the writes key's
// previous syncs made.
func (c *Controller) satisfied(key string) bool {
	return c.runner.Satisfied(expectKey(key, objects.StatefulSets), c.sets.Revision()) &&
		c.runner.Satisfied(expectKey(key, objects.ControllerRevisions), c.revs.Revision()) &&
		c.runner.Satisfied(expectKey(key, objects.Pods), c.podInf.Revision())
}

type syncStarted struct{}

// sync is kube's StatefulSetController.sync for one key, on the replica
// that owns it: it decides only from informers that show every write its
// previous syncs made (Runner.Expect); until they do, it waits for them.
func (c *Controller) sync(ctx context.Context, key string) error {
	now := time.Now()
	ns, name, err := controller.SplitKey(key)
	if err != nil {
		return nil
	}
	// The informers' revisions are checked before the StatefulSet is read:
	// one read first could be older than a revision read after it, and
	// satisfy an expectation it does not show.
	seen := c.satisfied(key)
	u, ok := c.sets.Get(ns, name)
	if !ok {
		for _, k := range expectKinds {
			c.runner.Forget(expectKey(key, k))
		}
		return nil
	}
	if !seen {
		c.runner.AddAfter(key, time.Second) // in case no informer event comes
		return nil
	}
	set := c.decodeSet(u)
	if set == nil {
		return nil
	}
	selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return nil // not transient (kube's)
	}
	ctx = context.WithValue(ctx, syncStarted{}, now)
	if err := c.adoptOrphanRevisions(ctx, set); err != nil {
		return err
	}
	pods, err := c.podsForSet(ctx, key, set, selector)
	if err != nil {
		return err
	}
	status, err := c.control.UpdateStatefulSet(ctx, set, pods, now)
	if err != nil {
		return err
	}
	// kube's syncStatefulSet: look again when the next pod becomes
	// available.
	if set.Spec.MinReadySeconds > 0 && status != nil && status.ReadyReplicas != status.AvailableReplicas {
		next := time.Duration(set.Spec.MinReadySeconds) * time.Second
		if d := kubecontroller.FindMinNextPodAvailabilityCheck(pods, set.Spec.MinReadySeconds, now, realClock{}); d != nil {
			next = *d
		}
		c.runner.AddAfter(key, next)
	}
	return nil
}

// canAdopt is kube's canAdoptFunc: a fresh read shows the set is still
// there, with its uid, and not being deleted.
func (c *Controller) canAdopt(ctx context.Context, set *apps.StatefulSet) error {
	u, err := c.env.Store.GetKind(ctx, objects.StatefulSets, set.Namespace, set.Name)
	if err != nil {
		return err
	}
	md := u.GetMetadata()
	if md.GetUid() != string(set.UID) {
		return fmt.Errorf("original StatefulSet %v/%v is gone: got uid %v, wanted %v", set.Namespace, set.Name, md.GetUid(), set.UID)
	}
	if md.GetDeletionTimestamp() != nil {
		return fmt.Errorf("%v/%v has just been deleted at %v", set.Namespace, set.Name, md.GetDeletionTimestamp().AsTime())
	}
	return nil
}

// adoptOrphanRevisions is kube's: the orphan ControllerRevisions the
// set's selector matches become its.
func (c *Controller) adoptOrphanRevisions(ctx context.Context, set *apps.StatefulSet) error {
	revisions, err := c.control.ListRevisions(set)
	if err != nil {
		return err
	}
	var orphans []*apps.ControllerRevision
	for _, r := range revisions {
		if metav1.GetControllerOfNoCopy(r) == nil {
			orphans = append(orphans, r)
		}
	}
	if len(orphans) == 0 {
		return nil
	}
	if err := c.canAdopt(ctx, set); err != nil {
		return fmt.Errorf("can't adopt ControllerRevisions: %v", err)
	}
	return c.control.AdoptOrphanRevisions(set, orphans)
}

// statefulPodRegex is kube's: a StatefulSet's pod is <set>-<ordinal>.
var statefulPodRegex = regexp.MustCompile("(.*)-([0-9]+)$")

// isMemberOf is kube's: pod is named as one of set's.
func isMemberOf(set *apps.StatefulSet, podName string) bool {
	m := statefulPodRegex.FindStringSubmatch(podName)
	return len(m) == 3 && m[1] == set.Name
}

// podsForSet is kube's getPodsForStatefulSet: the pods of set's namespace
// it controls, adopting the orphans its selector matches that are named
// as its members (after a fresh read shows it is not being deleted) and
// releasing its own that no longer match, as kube's
// PodControllerRefManager with kube's isMemberOf filter.
func (c *Controller) podsForSet(ctx context.Context, key string, set *apps.StatefulSet, sel labels.Selector) ([]*v1.Pod, error) {
	var out []*v1.Pod
	var errs error
	checked, canAdopt := false, error(nil)
	for _, p := range c.podInf.List(set.Namespace) {
		md := p.GetMetadata()
		claim := controller.ClaimOf(p, string(set.UID), sel, set.DeletionTimestamp != nil)
		member := isMemberOf(set, md.GetName())
		switch {
		case claim == controller.Owned && !member:
			claim = controller.Release
		case claim == controller.Adopt && !member:
			claim = controller.Ignore
		}
		switch claim {
		case controller.Owned:
			out = append(out, controller.KubePod(p))
		case controller.Adopt:
			if !checked {
				checked, canAdopt = true, c.canAdopt(ctx, set)
			}
			if canAdopt != nil {
				errs = errors.Join(errs, fmt.Errorf("can't adopt Pods: %v", canAdopt))
				continue
			}
			rev, err := controller.AdoptPod(ctx, c.env.Store, set.Namespace, md.GetName(),
				controller.ControllerRef("apps/v1", controllerKind.Kind, set.Name, string(set.UID)), sel)
			if err != nil {
				errs = errors.Join(errs, err)
				continue
			}
			c.expect(key, objects.Pods, rev)
			if rev > 0 {
				kp := controller.KubePod(p)
				kp.OwnerReferences = append(kp.OwnerReferences, *metav1.NewControllerRef(set, controllerKind))
				out = append(out, kp)
			}
		case controller.Release:
			rev, err := controller.ReleasePod(ctx, c.env.Store, set.Namespace, md.GetName(), string(set.UID))
			if err != nil {
				errs = errors.Join(errs, err)
				continue
			}
			c.expect(key, objects.Pods, rev)
		}
	}
	return out, errs
}

type realClock struct{}

func (realClock) Now() time.Time                  { return time.Now() }
func (realClock) Since(t time.Time) time.Duration { return time.Since(t) }

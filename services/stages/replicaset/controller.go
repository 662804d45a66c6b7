package replicaset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubecontroller "k8s.io/kubernetes/pkg/controller"
	kubers "k8s.io/kubernetes/pkg/controller/replicaset"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// Config configures the controller.
type Config struct {
	// Controller configures the replica's Runner (work queue, Leases).
	Controller controller.Config
	// BurstReplicas bounds the pods one sync creates or deletes (kube's
	// burstReplicas, 500); the next sync does the rest.
	BurstReplicas int
	// MaxInFlight bounds the creations one sync has in flight at once
	// (controller.SlowStart's window; default 500).
	MaxInFlight int
}

// DefaultConfig returns the defaults for a replica of the stage
// (pipeline.ReplicaSet or pipeline.ReplicationController).
func DefaultConfig(stageName, replica string) Config {
	return Config{Controller: controller.DefaultConfig(stageName, replica), BurstReplicas: 500, MaxInFlight: 500}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.BurstReplicas < 1 || c.MaxInFlight < 1 {
		return fmt.Errorf("replicaset: BurstReplicas (%d) and MaxInFlight (%d) must be at least 1", c.BurstReplicas, c.MaxInFlight)
	}
	if _, ok := kinds[c.Controller.Stage]; !ok {
		return fmt.Errorf("replicaset: stage %q is neither %s nor %s", c.Controller.Stage, pipeline.ReplicaSet, pipeline.ReplicationController)
	}
	return c.Controller.Validate()
}

// kinds are the objects each stage controls.
var kinds = map[string]objects.Kind{pipeline.ReplicaSet: objects.ReplicaSets, pipeline.ReplicationController: objects.ReplicationControllers}

// Controller is one replica of the ReplicaSet (or ReplicationController)
// controller stage.
type Controller struct {
	env    stage.Env
	cfg    Config
	kind   objects.Kind
	runner *controller.Runner
	pods   *controller.Pods
	sets   *informer.Informer[*corev1.Unstructured]
	podInf *informer.Informer[*corev1.Pod]
	// lazy runs podInf only while there is a set of the kind: adoption
	// and counts concern pods of a set, and kube's handlers drop a pod
	// that no set controls or selects.
	lazy   *informer.Lazy
	events *controller.Events
	log    *slog.Logger

	mu      sync.Mutex
	decoded map[string]*set         // by key: the last decoding of each object
	windows map[string]createWindow // by key: where the next sync's creations start
	// slots are by key the names of the set's pod slots derived so far:
	// each creating sync looks for the lowest free slots from slot 0.
	slots map[string]*controller.SlotNames

	kubeMu   sync.Mutex
	kubePods map[string]kubePod // by pod uid: the last conversion of each pod
}

// kubePod is a pod of the informer (src) converted to kube's type once,
// for what reads kube's Pods: the deletion ranking (which looks at all the
// pods of a set and of its Deployment's other sets, sync after sync while
// a set scales down) and the next availability check of a set with
// minReadySeconds. Counting a set's pods for its status reads the stored
// pods.
type kubePod struct {
	src *corev1.Pod
	pod *v1.Pod
}

// createWindow is how many creations of a set the next sync starts at
// once: the window the last sync's slow start reached, for the set's
// generation (a new template ramps up from one again, as it may be
// refused).
type createWindow struct {
	generation int64
	n          int
}

// set is a decoded ReplicaSet (a ReplicationController converted to one,
// as kube's replication controller converts it).
type set struct {
	rev int64
	rs  *apps.ReplicaSet
	sel labels.Selector // nil: an invalid selector, which matches nothing
	// match is sel's matcher; template the matcher of the template's
	// labels (kube's fullyLabeledReplicas).
	match, template controller.LabelMatcher
	// facts holds what the syncs found of each pod; it passes to the
	// next decoding while the uid, selector and template labels stay.
	facts *podFactsCache
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
	c := &Controller{env: env, cfg: cfg, kind: kinds[cfg.Controller.Stage], pods: controller.NewPods(env, req), log: log,
		decoded: map[string]*set{}, windows: map[string]createWindow{}, slots: map[string]*controller.SlotNames{}, kubePods: map[string]kubePod{}}
	component := "replicaset-controller"
	if c.kind.Name == objects.ReplicationControllers.Name {
		component = "replication-controller"
	}
	c.events = &controller.Events{Recorder: &events.Recorder{Store: env.Store, Component: component, Instance: env.Replica}}
	var err error
	if c.runner, err = controller.New(env.Store, cfg.Controller, c.sync, c.keys); err != nil {
		return nil, err
	}
	if c.sets, err = informer.NewKind(env.Store, c.kind, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			c.runner.Add(keyOf(u.GetMetadata()))
		},
		OnUpdate: func(_, u *corev1.Unstructured) { c.runner.Add(keyOf(u.GetMetadata())) },
		OnDelete: func(u *corev1.Unstructured) {
			c.lazy.Poke()
			key := keyOf(u.GetMetadata())
			c.mu.Lock()
			delete(c.decoded, key)
			delete(c.windows, key)
			delete(c.slots, key)
			c.mu.Unlock()
			c.runner.Forget(key)
		},
	}); err != nil {
		return nil, err
	}
	podHandlers := informer.Handlers[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod) { c.podChanged(nil, p) },
		OnUpdate: func(old, p *corev1.Pod) { c.podChanged(old, p) },
		OnDelete: func(p *corev1.Pod) {
			c.forgetKubePod(p)
			c.podChanged(p, nil)
		},
	}
	// A ReplicaSet of a Deployment ranks its pods for deletion by the
	// nodes of every pod its Deployment's sets select, whoever controls
	// them (relatedPods), so its stage keeps every pod; of a pod's spec
	// only the node, all the sync reads of it (KubePod): the containers
	// and volumes were most of each pod write's decoding. The
	// ReplicationController stage looks in full at its own kind's pods
	// and orphans only: in a cluster of Deployments it decodes no pod.
	if c.kind.Name == objects.ReplicaSets.Name {
		c.podInf, err = controller.NewPodSpecInformer(env.Store, podHandlers, controller.KubePodSpecFields...)
	} else {
		c.podInf, err = controller.NewPodInformer(env.Store, c.kind.Name, podHandlers)
	}
	if err != nil {
		return nil, err
	}
	// A sync looks at its set's pods and the namespace's orphans only,
	// not at every pod of the namespace (kube's pod controller index).
	controller.AddPodControllerIndex(c.podInf)
	if c.lazy, err = c.runner.LazyPods(c.podInf, func() bool { return c.sets.Len() > 0 }, c.sets); err != nil {
		return nil, err
	}
	c.lazy.OnStop(func() {
		c.kubeMu.Lock()
		clear(c.kubePods)
		c.kubeMu.Unlock()
	})
	return c, nil
}

func keyOf(md *corev1.ObjectMeta) string { return controller.Key(md.GetNamespace(), md.GetName()) }

// kubePod returns p as kube's Pod, converted once per object the
// informer holds (an update is a new object). The result is shared:
// callers read it, never change it. The cache is keyed by uid, which every
// stored pod has: no key is built for each pod of each sync.
func (c *Controller) kubePod(p *corev1.Pod) *v1.Pod {
	key := kubePodKey(p)
	c.kubeMu.Lock()
	k, ok := c.kubePods[key]
	c.kubeMu.Unlock()
	if ok && k.src == p {
		return k.pod
	}
	kp := controller.KubePod(p)
	c.kubeMu.Lock()
	c.kubePods[key] = kubePod{src: p, pod: kp}
	c.kubeMu.Unlock()
	return kp
}

func kubePodKey(p *corev1.Pod) string {
	if uid := p.GetMetadata().GetUid(); uid != "" {
		return uid
	}
	return keyOf(p.GetMetadata())
}

// kubePodsOf returns pods as kube's Pods (kubePod).
func (c *Controller) kubePodsOf(pods []*corev1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, c.kubePod(p))
	}
	return out
}

// forgetKubePod drops the conversion of a deleted pod.
func (c *Controller) forgetKubePod(p *corev1.Pod) {
	c.kubeMu.Lock()
	delete(c.kubePods, kubePodKey(p))
	c.kubeMu.Unlock()
}

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("replicaset: the controller consumes no events"))
}

// Start runs the informers, the Lease and the workers on g; it returns
// once the informers are synced.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.sets, c.lazy)
	return c.runner.Start(ctx, g, &infs)
}

// Reconcile queues every object.
func (c *Controller) Reconcile(ctx context.Context) error { return c.runner.Reconcile(ctx) }

// Runner is the replica's Runner (tests read its Members).
func (c *Controller) Runner() *controller.Runner { return c.runner }

func (c *Controller) keys() []string {
	var out []string
	for _, u := range c.sets.List("") {
		out = append(out, keyOf(u.GetMetadata()))
	}
	return out
}

// podChanged queues the objects a pod change concerns: its controller's
// (before and after), and, for an orphan, every object of its namespace
// whose selector matches it (which may adopt it), as kube's addPod,
// updatePod and deletePod.
func (c *Controller) podChanged(old, p *corev1.Pod) {
	for _, q := range []*corev1.Pod{old, p} {
		if q == nil {
			continue
		}
		md := q.GetMetadata()
		if ref := controller.ControllerOf(md); ref != nil {
			if ref.GetKind() == c.kind.Name {
				c.runner.Add(controller.Key(md.GetNamespace(), ref.GetName()))
			}
			continue
		}
		if md.GetDeletionTimestamp() != nil {
			continue
		}
		for _, u := range c.sets.List(md.GetNamespace()) {
			if s := c.decode(u); s != nil && s.match.Matches(md.GetLabels()) {
				c.runner.Add(keyOf(u.GetMetadata()))
			}
		}
	}
}

// decode returns u as a ReplicaSet, decoded once per revision; nil when it
// does not decode.
func (c *Controller) decode(u *corev1.Unstructured) *set {
	key, rev := keyOf(u.GetMetadata()), objects.Revision(u)
	c.mu.Lock()
	prev := c.decoded[key]
	c.mu.Unlock()
	if prev != nil && prev.rev == rev {
		return prev
	}
	rs, err := toReplicaSet(u)
	if err != nil {
		c.log.Warn("undecodable object", "kind", c.kind.Name, "key", key, "err", err)
		return nil
	}
	s := &set{rev: rev, rs: rs, template: controller.NewLabelMatcher(labels.Set(rs.Spec.Template.Labels).AsSelectorPreValidated())}
	if sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector); err == nil {
		s.sel = sel
		s.match = controller.NewLabelMatcher(sel)
	}
	// A status write is a new revision: what the syncs found of the pods
	// still holds unless what it depends on changed.
	if prev != nil && prev.rs.UID == rs.UID && reflect.DeepEqual(prev.rs.Spec.Selector, rs.Spec.Selector) &&
		maps.Equal(prev.rs.Spec.Template.Labels, rs.Spec.Template.Labels) {
		s.facts = prev.facts
	} else {
		s.facts = &podFactsCache{m: map[*corev1.Pod]podFacts{}}
	}
	c.mu.Lock()
	c.decoded[key] = s
	c.mu.Unlock()
	return s
}

// toReplicaSet decodes a stored ReplicaSet, or converts a stored
// ReplicationController to one (kube's convertRCtoRS).
func toReplicaSet(u *corev1.Unstructured) (*apps.ReplicaSet, error) {
	k, err := manifest.ToKube(u)
	if err != nil {
		return nil, err
	}
	switch o := k.(type) {
	case *apps.ReplicaSet:
		return o, nil
	case *v1.ReplicationController:
		return rcToRS(o)
	}
	return nil, fmt.Errorf("replicaset: a stored %s is a %T", u.GetKind(), k)
}

// sync is kube's syncReplicaSet for one key.
func (c *Controller) sync(ctx context.Context, key string) error {
	started := time.Now()
	ns, name, err := controller.SplitKey(key)
	if err != nil {
		return nil
	}
	u, ok := c.sets.Get(ns, name)
	if !ok {
		c.runner.Forget(key)
		return nil
	}
	s := c.decode(u)
	if s == nil {
		return nil
	}
	rs := s.rs
	needsSync := c.runner.Satisfied(key, c.podInf.Revision())

	// Each pod is read through its facts (podFacts), found once per
	// stored pod; kube's Pod is made only for what needs it (deletion
	// ranking, the next availability check).
	var owned []*corev1.Pod
	var counts podCounts
	var claimErr error
	uid, unusable, deleting := string(rs.UID), !s.match.Usable(), rs.DeletionTimestamp != nil
	pods := controller.PodsOf(c.podInf, ns, c.kind.Name, rs.Name, uid, true)
	facts := s.facts.begin()
	for _, p := range pods {
		f := facts.of(p, uid, s)
		if f.other {
			continue
		}
		if !f.active {
			if f.ref != nil && f.deleting && f.selects {
				counts.terminating++
			}
			continue
		}
		md := p.GetMetadata()
		switch controller.ClaimMatched(md, f.ref, uid, !unusable && f.selects, unusable, deleting) {
		case controller.Owned:
			owned = append(owned, p)
			counts.add(p, f, rs.Spec.MinReadySeconds)
		case controller.Adopt:
			if !needsSync {
				continue // adopted once the informers caught up
			}
			if err := c.adopt(ctx, key, rs, p, s.sel); err != nil {
				claimErr = errors.Join(claimErr, err)
				continue
			}
			owned = append(owned, p)
			counts.add(p, f, rs.Spec.MinReadySeconds)
		case controller.Release:
			rev, err := controller.ReleasePod(ctx, c.env.Store, ns, md.GetName(), string(rs.UID))
			if err != nil {
				claimErr = errors.Join(claimErr, err)
				continue
			}
			c.runner.Expect(key, rev)
		}
	}
	facts.end()
	if claimErr != nil {
		return claimErr
	}
	var manageErr error
	if needsSync && rs.DeletionTimestamp == nil {
		manageErr = c.manage(ctx, key, rs, owned, started)
	} else if !needsSync {
		c.runner.AddAfter(key, time.Second) // in case no pod event comes
	}
	rs = rs.DeepCopy()
	now := time.Now()
	st := calculateStatus(rs, counts, manageErr, c.kind.Name == objects.ReplicaSets.Name, now)
	updated, err := c.writeStatus(ctx, u, rs, st)
	if err != nil {
		return err
	}
	if manageErr != nil {
		return manageErr
	}
	if updated.Spec.MinReadySeconds > 0 && updated.Status.ReadyReplicas != updated.Status.AvailableReplicas {
		next := time.Duration(updated.Spec.MinReadySeconds) * time.Second
		if d := kubecontroller.FindMinNextPodAvailabilityCheck(c.kubePodsOf(owned), updated.Spec.MinReadySeconds, now, realClock{}); d != nil {
			next = *d
		}
		c.runner.AddAfter(key, next)
	}
	return nil
}

// active is kube's controller.IsPodActive: not terminal, not terminating.
func active(p *corev1.Pod) bool {
	ph := p.GetStatus().GetPhase()
	return ph != string(v1.PodSucceeded) && ph != string(v1.PodFailed) && p.GetMetadata().GetDeletionTimestamp() == nil
}

// adopt makes an orphan the set's, after checking with a fresh read that
// the set is still there and not being deleted (kube's
// RecheckDeletionTimestamp).
func (c *Controller) adopt(ctx context.Context, key string, rs *apps.ReplicaSet, p *corev1.Pod, sel labels.Selector) error {
	fresh, err := c.env.Store.GetKind(ctx, c.kind, rs.Namespace, rs.Name)
	if err != nil {
		return err
	}
	if fresh.GetMetadata().GetUid() != string(rs.UID) || fresh.GetMetadata().GetDeletionTimestamp() != nil {
		return fmt.Errorf("%s %s/%s is gone or being deleted: not adopting %s", c.kind.Name, rs.Namespace, rs.Name, p.GetMetadata().GetName())
	}
	rev, err := controller.AdoptPod(ctx, c.env.Store, rs.Namespace, p.GetMetadata().GetName(), c.controllerRef(rs), sel)
	if err != nil {
		return err
	}
	c.runner.Expect(key, rev)
	return nil
}

func (c *Controller) controllerRef(rs *apps.ReplicaSet) *corev1.OwnerReference {
	return controller.ControllerRef(c.kind.APIVersion(), c.kind.Name, rs.Name, string(rs.UID))
}

// manage creates or deletes pods so that the set has spec.replicas, at
// most BurstReplicas per sync (kube's manageReplicas).
func (c *Controller) manage(ctx context.Context, key string, rs *apps.ReplicaSet, owned []*corev1.Pod, started time.Time) error {
	want := int(ptrOr(rs.Spec.Replicas, 1))
	pending := c.unobservedPending(key, rs.Namespace)
	diff := len(owned) + len(pending) - want
	switch {
	case diff < 0 || len(pending) > 0:
		return c.create(ctx, key, rs, pending, max(0, min(-diff, c.cfg.BurstReplicas)), started)
	case diff > 0:
		return c.delete(ctx, key, rs, c.kubePodsOf(owned), min(diff, c.cfg.BurstReplicas))
	}
	return nil
}

// unobservedPending returns key's pending pod names not yet in the
// informer: creations that got no answer, still on their way.
func (c *Controller) unobservedPending(key, ns string) []string {
	var out []string
	for _, n := range c.runner.Pending(key) {
		if _, ok := c.podInf.Get(ns, n); ok {
			c.runner.SetPending(key, n, false)
			continue
		}
		out = append(out, n)
	}
	return out
}

// create asks for the pending names again, then for n new pods in the
// lowest free slots.
func (c *Controller) create(ctx context.Context, key string, rs *apps.ReplicaSet, pending []string, n int, started time.Time) error {
	tmpl, err := c.template(rs)
	if err != nil {
		c.events.Record(ctx, c.kind.APIVersion(), c.kind.Name, rs.Namespace, rs.Name, string(rs.UID), "Warning", "FailedCreate", "Error creating: "+err.Error())
		return err
	}
	taken := func(name string) bool {
		_, ok := c.podInf.Get(rs.Namespace, name)
		return ok
	}
	isPending := map[string]bool{}
	for _, p := range pending {
		isPending[p] = true
	}
	c.mu.Lock()
	slots := c.slots[key]
	if slots == nil {
		slots = &controller.SlotNames{}
		c.slots[key] = slots
	}
	c.mu.Unlock()
	slots.Reset(rs.Name+"-", string(rs.UID))
	names := append(pending, slots.Free(n, func(name string) bool { return taken(name) || isPending[name] })...)
	// A set of more than a burst is created over several syncs: each
	// starts at the window the last one reached, so the creations ramp up
	// once (one round trip through the pipeline per doubling), not at
	// every burst; a failure starts the next from one again.
	c.mu.Lock()
	start := 1
	if w, ok := c.windows[key]; ok && w.generation == rs.Generation {
		start = w.n
	}
	c.mu.Unlock()
	_, reached, err := controller.SlowStartFrom(ctx, len(names), start, c.cfg.MaxInFlight, func() bool { return c.runner.Owns(key) }, func(ctx context.Context, i int) error {
		return c.createOne(ctx, key, rs, tmpl, names[i], started)
	})
	c.mu.Lock()
	c.windows[key] = createWindow{generation: rs.Generation, n: reached}
	c.mu.Unlock()
	return err
}

// template is the pod every pod of rs is made from (its name unset).
func (c *Controller) template(rs *apps.ReplicaSet) (*corev1.Pod, error) {
	pod, err := controller.PodFromTemplate(rs.Namespace, &rs.Spec.Template, nil)
	if err != nil {
		return nil, err
	}
	pod.Metadata.OwnerReferences = []*corev1.OwnerReference{c.controllerRef(rs)}
	return pod, nil
}

func (c *Controller) createOne(ctx context.Context, key string, rs *apps.ReplicaSet, tmpl *corev1.Pod, name string, started time.Time) error {
	// The pod shares the template's spec: a creation only encodes it.
	pod := &corev1.Pod{Metadata: vt.Clone(tmpl.GetMetadata()), Spec: tmpl.GetSpec(), Status: tmpl.GetStatus()}
	pod.Metadata.Name = name
	rev, err := c.pods.CreateRevision(ctx, pod, started)
	var se *controller.StatusError
	switch {
	case err == nil:
		c.runner.SetPending(key, name, false)
		c.runner.Expect(key, rev)
		c.events.Record(ctx, c.kind.APIVersion(), c.kind.Name, rs.Namespace, rs.Name, string(rs.UID), "Normal", "SuccessfulCreate", "Created pod: "+name)
		return nil
	case errors.Is(err, controller.ErrNameTaken):
		c.runner.SetPending(key, name, false)
		kv, gerr := c.env.Store.KV().Get(ctx, objects.Pods.Key(rs.Namespace, name))
		if gerr == nil {
			c.runner.Expect(key, kv.ModRevision)
		} else if !errors.Is(gerr, raftstore.ErrNotFound) {
			return gerr
		}
		return nil
	case errors.Is(err, controller.ErrUncertain):
		c.runner.SetPending(key, name, true)
		return err
	case errors.As(err, &se):
		c.runner.SetPending(key, name, false)
		c.events.Record(ctx, c.kind.APIVersion(), c.kind.Name, rs.Namespace, rs.Name, string(rs.UID), "Warning", "FailedCreate", "Error creating: "+se.Status.GetMessage())
		return err
	}
	return err
}

// delete deletes n of the active pods, ranked as kube ranks them
// (getPodsToDelete: unscheduled, pending, not ready, more pods of the same
// owner on its node, ... first).
func (c *Controller) delete(ctx context.Context, key string, rs *apps.ReplicaSet, activeKube []*v1.Pod, n int) error {
	victims := podsToDelete(activeKube, c.relatedPods(rs), n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.MaxInFlight)
	for _, v := range victims {
		g.Go(func() error {
			p, err := c.pods.Delete(gctx, v.Namespace, v.Name)
			if errors.Is(err, raftstore.ErrNotFound) {
				return nil
			}
			if err != nil {
				c.events.Record(ctx, c.kind.APIVersion(), c.kind.Name, rs.Namespace, rs.Name, string(rs.UID), "Warning", "FailedDelete", "Error deleting: "+err.Error())
				return err
			}
			c.runner.Expect(key, objects.Revision(p))
			c.events.Record(ctx, c.kind.APIVersion(), c.kind.Name, rs.Namespace, rs.Name, string(rs.UID), "Normal", "SuccessfulDelete", "Deleted pod: "+v.Name)
			return nil
		})
	}
	return g.Wait()
}

// relatedPods are the pods of every set with rs's controller (the
// ReplicaSets of one Deployment), kube's getIndirectlyRelatedPods: they
// rank pods on crowded nodes first for deletion.
func (c *Controller) relatedPods(rs *apps.ReplicaSet) []*v1.Pod {
	owner := metav1.GetControllerOfNoCopy(rs)
	if owner == nil {
		return nil
	}
	var sels []controller.LabelMatcher
	for _, u := range c.sets.List(rs.Namespace) {
		s := c.decode(u)
		if s == nil || s.sel == nil {
			continue
		}
		if o := metav1.GetControllerOfNoCopy(s.rs); o != nil && o.UID == owner.UID {
			sels = append(sels, s.match)
		}
	}
	var out []*v1.Pod
	for _, p := range c.podInf.List(rs.Namespace) {
		for _, sel := range sels {
			if sel.Matches(p.GetMetadata().GetLabels()) {
				out = append(out, c.kubePod(p))
				break
			}
		}
	}
	return out
}

// podsToDelete is kube's getPodsToDelete.
func podsToDelete(pods, related []*v1.Pod, n int) []*v1.Pod {
	if n < len(pods) {
		onNode := map[string]int{}
		for _, p := range related {
			if kubecontroller.IsPodActive(p) {
				onNode[p.Spec.NodeName]++
			}
		}
		ranks := make([]int, len(pods))
		for i, p := range pods {
			ranks[i] = onNode[p.Spec.NodeName]
		}
		sort.Sort(kubecontroller.ActivePodsWithRanks{Pods: pods, Rank: ranks, Now: metav1.Now()})
	}
	return pods[:n]
}

// podFacts is what a sync reads of a pod, found once per stored pod (the
// informer's pods are never changed: an update is a new pod) for a set's
// uid, selector and template labels: a set's syncs, sync after sync, look
// at every one of its pods, and matching each pod's labels and finding
// its controller and readiness again each time was most of the stage's
// CPU while a Deployment of 10,000 replicas came up.
type podFacts struct {
	sync   uint64                 // the last sync that looked at the pod
	ref    *corev1.OwnerReference // its controller reference, nil for none
	other  bool                   // its controller is another object
	active bool                   // neither terminal nor terminating
	// deleting: it has a deletionTimestamp; selects: the set's selector
	// matches it; fully: it has every label of the set's template; ready:
	// its Ready condition is True.
	deleting, selects, fully, ready bool
}

// podFactsCache keeps the podFacts of a set's pods. One sync at a time
// reads it (begin, of, end); the lock guards the hand-over between syncs
// on different workers.
type podFactsCache struct {
	mu     sync.Mutex
	sync   uint64
	m      map[*corev1.Pod]podFacts
	looked int
}

// begin starts a sync's reading and locks the cache until end.
func (fc *podFactsCache) begin() *podFactsCache {
	fc.mu.Lock()
	fc.sync++
	fc.looked = 0
	return fc
}

// of returns p's facts for the set s (with uid), found now if p is new.
func (fc *podFactsCache) of(p *corev1.Pod, uid string, s *set) podFacts {
	fc.looked++
	f, ok := fc.m[p]
	if !ok {
		md := p.GetMetadata()
		ref := controller.ControllerOf(md)
		f = podFacts{ref: ref, other: ref != nil && ref.GetUid() != uid, active: active(p), deleting: md.GetDeletionTimestamp() != nil,
			selects: s.match.Matches(md.GetLabels()), fully: s.template.Matches(md.GetLabels()), ready: controller.PodReady(p)}
	}
	f.sync = fc.sync
	fc.m[p] = f
	return f
}

// end drops the facts of the pods this sync did not look at (replaced by
// an update, deleted) and unlocks the cache.
func (fc *podFactsCache) end() {
	if len(fc.m) > fc.looked {
		for p, f := range fc.m {
			if f.sync != fc.sync {
				delete(fc.m, p)
			}
		}
	}
	fc.mu.Unlock()
}

// podCounts are the counts of a set's pods its status holds.
type podCounts struct {
	active, fully, ready, terminating int
	// readyPods are the ready pods of a set with minReadySeconds: whether
	// each is available yet depends on when the status is computed.
	readyPods []*corev1.Pod
}

// add counts an active pod of the set.
func (n *podCounts) add(p *corev1.Pod, f podFacts, minReadySeconds int32) {
	n.active++
	if f.fully {
		n.fully++
	}
	if f.ready {
		n.ready++
		if minReadySeconds > 0 {
			n.readyPods = append(n.readyPods, p)
		}
	}
}

// calculateStatus is kube's calculateStatus, on the counts of the set's
// active and terminating pods.
func calculateStatus(rs *apps.ReplicaSet, n podCounts, manageErr error, terminatingReplicas bool, now time.Time) apps.ReplicaSetStatus {
	st := rs.Status
	available := n.ready
	if rs.Spec.MinReadySeconds > 0 {
		available = 0
		for _, p := range n.readyPods {
			if controller.PodAvailable(p, rs.Spec.MinReadySeconds, now) {
				available++
			}
		}
	}
	failure := kubers.GetCondition(rs.Status, apps.ReplicaSetReplicaFailure)
	if manageErr != nil && failure == nil {
		var reason string
		if diff := n.active - int(ptrOr(rs.Spec.Replicas, 1)); diff < 0 {
			reason = "FailedCreate"
		} else if diff > 0 {
			reason = "FailedDelete"
		}
		kubers.SetCondition(&st, kubers.NewReplicaSetCondition(apps.ReplicaSetReplicaFailure, v1.ConditionTrue, reason, manageErr.Error()))
	} else if manageErr == nil && failure != nil {
		kubers.RemoveCondition(&st, apps.ReplicaSetReplicaFailure)
	}
	st.Replicas = int32(n.active)
	st.FullyLabeledReplicas = int32(n.fully)
	st.ReadyReplicas = int32(n.ready)
	st.AvailableReplicas = int32(available)
	st.TerminatingReplicas = nil
	if terminatingReplicas {
		t := int32(n.terminating)
		st.TerminatingReplicas = &t
	}
	return st
}

// writeStatus stores st as u's status when it changed (kube's
// updateReplicaSetStatus), comparing u's revision; it returns the set as
// it is now.
func (c *Controller) writeStatus(ctx context.Context, u *corev1.Unstructured, rs *apps.ReplicaSet, st apps.ReplicaSetStatus) (*apps.ReplicaSet, error) {
	if rs.Status.Replicas == st.Replicas && rs.Status.FullyLabeledReplicas == st.FullyLabeledReplicas &&
		rs.Status.ReadyReplicas == st.ReadyReplicas && rs.Status.AvailableReplicas == st.AvailableReplicas &&
		int32PtrEqual(rs.Status.TerminatingReplicas, st.TerminatingReplicas) && rs.Generation == rs.Status.ObservedGeneration &&
		reflect.DeepEqual(rs.Status.Conditions, st.Conditions) {
		return rs, nil
	}
	st.ObservedGeneration = rs.Generation
	rs.Status = st
	out, err := c.fromReplicaSet(u, rs)
	if err != nil {
		return nil, err
	}
	if _, err := c.env.Store.Update(ctx, out); err != nil {
		if errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrNotFound) {
			return nil, fmt.Errorf("update status of %s %s/%s: %w", c.kind.Name, rs.Namespace, rs.Name, err) // retried from the informer's newer copy
		}
		return nil, err
	}
	return rs, nil
}

// fromReplicaSet is the stored form of rs: u with rs's status (a
// ReplicationController's status converted back).
func (c *Controller) fromReplicaSet(u *corev1.Unstructured, rs *apps.ReplicaSet) (*corev1.Unstructured, error) {
	k, err := manifest.ToKube(u)
	if err != nil {
		return nil, err
	}
	switch o := k.(type) {
	case *apps.ReplicaSet:
		o.Status = rs.Status
	case *v1.ReplicationController:
		rc, err := rsToRC(rs)
		if err != nil {
			return nil, err
		}
		o.Status = rc.Status
	}
	m, err := manifest.FromKube(k)
	if err != nil {
		return nil, err
	}
	out := m.(*corev1.Unstructured)
	out.Metadata = vt.Clone(u.GetMetadata()) // the informer's copy is shared
	return out, nil
}

func int32PtrEqual(a, b *int32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

type realClock struct{}

func (realClock) Now() time.Time                  { return time.Now() }
func (realClock) Since(t time.Time) time.Duration { return time.Since(t) }

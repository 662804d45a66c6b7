package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/status"
)

// StageConfig configures the scheduler stage.
type StageConfig struct {
	Scheduler Config
	// SchedulerName is the name pods select with spec.schedulerName (empty
	// selects it too). Default "default-scheduler".
	SchedulerName string
	// InitialBackoff and MaxBackoff bound the retry delay of an
	// unschedulable pod; a node becoming available or a pod going away
	// retries at once.
	InitialBackoff, MaxBackoff time.Duration
	// OrphanAge: Reconcile schedules an unbound pod nobody has tried for
	// this long (its event was lost, or its replica died).
	OrphanAge time.Duration
}

// DefaultStageConfig returns kube-scheduler's backoffs (1s to 10s).
func DefaultStageConfig() StageConfig {
	return StageConfig{
		Scheduler: DefaultConfig(), SchedulerName: "default-scheduler",
		InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, OrphanAge: 5 * time.Second,
	}
}

// Validate checks the StageConfig.
func (c StageConfig) Validate() error {
	if c.InitialBackoff <= 0 || c.MaxBackoff < c.InitialBackoff || c.OrphanAge <= 0 {
		return fmt.Errorf("scheduler: stage config: backoff [%s, %s] and orphan age %s must be positive and ordered", c.InitialBackoff, c.MaxBackoff, c.OrphanAge)
	}
	return c.Scheduler.Validate()
}

// Counters are the stage's running totals, for metrics and tests.
type Counters struct {
	Scheduled, Unschedulable, Conflicts, Errors atomic.Int64
}

// Stage is one replica of the scheduler stage. Replicas share the
// PodPersisted consumer; each keeps its own cache of nodes and bound pods
// fed by store watches, decides with the pure Scheduler under one lock
// (assuming the pod onto its node), and binds with a store transaction
// that compares the pod (still unbound) and the node's NodeAllocation
// (still what the decision saw), so that replicas never bind a pod twice or
// overcommit a node. A lost race re-queues the pod at once.
type Stage struct {
	env   stage.Env
	cfg   StageConfig
	cache *Cache
	rec   *events.Recorder

	mu    sync.Mutex // one scheduling cycle at a time
	sched *Scheduler
	snap  *Snapshot

	nodes  *informer.Informer[*corev1.Node]
	pods   *informer.Informer[*corev1.Pod]
	allocs *informer.Informer[*corev1.NodeAllocation]

	qmu       sync.Mutex
	waiting   map[string]*waitingPod // unschedulable pods by uid
	kick      chan struct{}          // a node or capacity appeared
	tried     sync.Map               // uid -> time of the last attempt by this replica
	conflicts sync.Map               // uid -> *atomic.Int32: lost bind races, for the PodScheduled event

	Counters Counters
}

type waitingPod struct {
	ns, name string
	attempts int32
	next     time.Time
}

var (
	_ stage.Starter    = (*Stage)(nil)
	_ stage.Reconciler = (*Stage)(nil)
)

// NewStage returns a scheduler stage replica.
func NewStage(env stage.Env, cfg StageConfig) (*Stage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sched, err := New(cfg.Scheduler)
	if err != nil {
		return nil, err
	}
	s := &Stage{
		env: env, cfg: cfg, cache: NewCache(), sched: sched, snap: NewSnapshot(),
		rec:     &events.Recorder{Store: env.Store, Component: cfg.SchedulerName, Instance: env.Replica},
		waiting: map[string]*waitingPod{}, kick: make(chan struct{}, 1),
	}
	logErr := func(what string, err error) {
		if err != nil && env.Log != nil {
			env.Log.Warn("scheduler cache", "op", what, "err", err)
		}
	}
	s.nodes, err = informer.New[*corev1.Node](env.Store, "", informer.Handlers[*corev1.Node]{
		OnAdd:    func(n *corev1.Node) { logErr("add node", s.cache.AddNode(n)); s.wake() },
		OnUpdate: func(_, n *corev1.Node) { logErr("update node", s.cache.UpdateNode(n)); s.wake() },
		OnDelete: func(n *corev1.Node) { logErr("remove node", s.cache.RemoveNode(n.GetMetadata().GetName())) },
	})
	if err != nil {
		return nil, err
	}
	bound := func(p *corev1.Pod) bool { return p.GetSpec().GetNodeName() != "" }
	s.pods, err = informer.New[*corev1.Pod](env.Store, "", informer.Handlers[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) {
			if bound(p) {
				logErr("add pod", s.cache.AddPod(p))
			}
		},
		OnUpdate: func(_, p *corev1.Pod) {
			if bound(p) {
				logErr("update pod", s.cache.UpdatePod(p))
			}
		},
		OnDelete: func(p *corev1.Pod) {
			if bound(p) {
				logErr("remove pod", s.cache.RemovePod(p))
				s.wake()
			}
			s.forget(p.GetMetadata().GetUid())
		},
	})
	if err != nil {
		return nil, err
	}
	s.allocs, err = informer.New[*corev1.NodeAllocation](env.Store, "", informer.Handlers[*corev1.NodeAllocation]{})
	return s, err
}

// Start runs the informers, waits for their first lists, and starts the
// retry loop of unschedulable pods.
func (s *Stage) Start(ctx context.Context, g *errgroup.Group) error {
	for _, run := range []func(context.Context) error{s.nodes.Run, s.pods.Run, s.allocs.Run} {
		g.Go(func() error {
			if err := run(ctx); !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		})
	}
	for _, w := range []func(context.Context) error{s.nodes.WaitForSync, s.pods.WaitForSync, s.allocs.WaitForSync} {
		if err := w(ctx); err != nil {
			return err
		}
	}
	g.Go(func() error { s.retryLoop(ctx); return nil })
	return nil
}

// Handle schedules the pod of a PodPersisted (PodDeleted only frees room:
// the informer already noticed, and unschedulable pods are retried).
func (s *Stage) Handle(ctx context.Context, d *bus.Delivery) error {
	env := d.Envelope
	switch env.Type() {
	case "PodDeleted":
		s.wake()
		return nil
	case "PodPersisted":
	default:
		return bus.Permanent(fmt.Errorf("scheduler: unexpected event %s", env.Type()))
	}
	return s.schedulePod(ctx, env.GetNamespace(), env.GetPodName(), env.GetPodUid(), d)
}

// schedulePod runs one scheduling attempt for ns/name; d is the delivery
// that caused it (nil for retries and reconciliation).
func (s *Stage) schedulePod(ctx context.Context, ns, name, uid string, d *bus.Delivery) error {
	s.tried.Store(uid, time.Now())
	for {
		pod, err := objects.Get[*corev1.Pod](ctx, s.env.Store, ns, name)
		if errors.Is(err, raftstore.ErrNotFound) {
			s.forget(uid)
			return nil
		}
		if err != nil {
			return err
		}
		if uid != "" && pod.GetMetadata().GetUid() != uid {
			return nil // another pod of that name now
		}
		if pod.GetMetadata().GetDeletionTimestamp() != nil || !s.responsible(pod) {
			s.forget(uid)
			return nil
		}
		if node := pod.GetSpec().GetNodeName(); node != "" {
			// Bound already (by us before a crash, or another replica):
			// make sure the node heard of it. Same event id: deduplicated.
			s.forget(uid)
			return s.publishScheduled(ctx, d, pod, node, 0, Result{})
		}

		s.mu.Lock()
		s.cache.UpdateSnapshot(s.snap)
		res, err := s.sched.Schedule(pod, s.snap)
		if err == nil {
			err = s.cache.AssumePod(pod, res.Node)
			if errors.Is(err, ErrPodExists) && s.cache.IsAssumed(pod) {
				// Assumed by an attempt of ours that did not finish.
				_ = s.cache.ForgetPod(pod)
				err = s.cache.AssumePod(pod, res.Node)
			}
		}
		s.mu.Unlock()

		var fit *FitError
		switch {
		case errors.As(err, &fit):
			return s.unschedulable(ctx, d, pod, fit.Error(), fit)
		case errors.Is(err, ErrNoNodesAvailable):
			return s.unschedulable(ctx, d, pod, "0/0 nodes are available.", nil)
		case err != nil:
			s.Counters.Errors.Add(1)
			return bus.Permanent(err)
		}

		start := time.Now()
		bindErr := s.bind(ctx, pod, res.Node)
		bindNanos := time.Since(start)
		switch {
		case bindErr == nil:
			s.forget(uid)
			s.Counters.Scheduled.Add(1)
			return s.publishScheduled(ctx, d, pod, res.Node, int32(s.conflictsOf(uid)), res, bindNanos)
		case errors.Is(bindErr, raftstore.ErrConflict), errors.Is(bindErr, errNoLongerFits):
			// Lost a race: the pod or the node changed. Re-queue against
			// fresh state at once.
			_ = s.cache.ForgetPod(pod)
			s.Counters.Conflicts.Add(1)
			s.noteConflict(uid)
			if err := s.waitForCache(ctx); err != nil {
				return err
			}
			continue
		default:
			_ = s.cache.ForgetPod(pod)
			return bindErr
		}
	}
}

var errNoLongerFits = errors.New("scheduler: the node's allocation no longer fits the pod")

// bind sets spec.nodeName and accounts the pod on its node in one
// transaction: the pod must still be the unbound revision we read, the
// node's NodeAllocation the revision we checked.
func (s *Stage) bind(ctx context.Context, pod *corev1.Pod, nodeName string) error {
	node, ok := s.nodes.Get("", nodeName)
	if !ok {
		return errNoLongerFits
	}
	alloc, err := objects.Get[*corev1.NodeAllocation](ctx, s.env.Store, "", nodeName)
	allocRev := int64(0)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		alloc = nil
	case err != nil:
		return err
	default:
		allocRev = objects.Revision(alloc)
	}
	reasons, err := CheckAllocationFit(node, alloc, pod)
	if err != nil {
		return err
	}
	if len(reasons) > 0 {
		return fmt.Errorf("%w: %v", errNoLongerFits, reasons)
	}
	next, _, err := MergeAllocation(alloc, nodeName, pod)
	if err != nil {
		return err
	}
	bound := proto.CloneOf(pod)
	bound.Spec.NodeName = nodeName
	if bound.Status == nil {
		bound.Status = &corev1.PodStatus{}
	}
	status.MarkCondition(bound.Status, "PodScheduled", "True", "", "", timestamppb.Now())
	podBytes, err := objects.Encode(bound)
	if err != nil {
		return err
	}
	allocBytes, err := objects.Encode(next)
	if err != nil {
		return err
	}
	podKey, allocKey := objects.Pods.Key(pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName()), objects.NodeAllocations.Key("", nodeName)
	_, err = s.env.Store.Client().Txn(ctx, raftstore.Txn{
		Compares: []raftstore.Compare{{Key: podKey, ModRevision: objects.Revision(pod)}, {Key: allocKey, ModRevision: allocRev}},
		Ops: []raftstore.Op{
			{Type: raftstore.OpPut, Key: podKey, Value: podBytes},
			{Type: raftstore.OpPut, Key: allocKey, Value: allocBytes},
		},
	})
	return err
}

// waitForCache lets the informers catch up after a lost race, so the next
// cycle sees the state that beat us.
func (s *Stage) waitForCache(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Millisecond):
		return nil
	}
}

func (s *Stage) publishScheduled(ctx context.Context, d *bus.Delivery, pod *corev1.Pod, node string, conflicts int32, res Result, bind ...time.Duration) error {
	payload := &eventsv1.PodScheduled{
		NodeName: node, Conflicts: conflicts,
		FilterNanos: res.FilterDuration.Nanoseconds(), ScoreNanos: res.ScoreDuration.Nanoseconds(),
	}
	if len(bind) > 0 {
		payload.BindNanos = bind[0].Nanoseconds()
	}
	var next *eventsv1.Envelope
	if d != nil {
		next = d.Next(payload)
	} else {
		var err error
		if next, err = stage.PodEvent(s.env, pod, 1, payload); err != nil {
			return err
		}
	}
	next.NodeName, next.PodUid, next.Generation = node, pod.GetMetadata().GetUid(), 1
	if _, err := s.env.Bus.Publish(ctx, next); err != nil {
		return err
	}
	md := pod.GetMetadata()
	return s.rec.Record(ctx, events.PodRef(pod), events.Normal, eventsv1.ReasonScheduled,
		fmt.Sprintf("Successfully assigned %s/%s to %s", md.GetNamespace(), md.GetName(), node), next.GetId())
}

// unschedulable records why the pod cannot be placed — PodScheduled=False
// with reason Unschedulable, a FailedScheduling event, a PodUnschedulable
// event with every node's verdict — and queues it for a retry.
func (s *Stage) unschedulable(ctx context.Context, d *bus.Delivery, pod *corev1.Pod, msg string, fit *FitError) error {
	s.Counters.Unschedulable.Add(1)
	uid := pod.GetMetadata().GetUid()
	attempts := s.queue(pod)
	now := timestamppb.Now()
	_, err := objects.Mutate(ctx, s.env.Store, pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), func(p *corev1.Pod) error {
		if p.GetMetadata().GetUid() != uid || p.GetSpec().GetNodeName() != "" {
			return objects.ErrNoChange
		}
		if p.Status == nil {
			p.Status = &corev1.PodStatus{}
		}
		if !status.MarkCondition(p.Status, "PodScheduled", "False", eventsv1.ReasonUnschedulable, msg, now) {
			return objects.ErrNoChange
		}
		return nil
	})
	if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		return err
	}
	payload := &eventsv1.PodUnschedulable{Reason: eventsv1.ReasonUnschedulable, Message: msg}
	if fit != nil {
		payload.Verdicts = verdicts(fit, maxVerdicts)
	}
	var next *eventsv1.Envelope
	if d != nil {
		next = d.Next(payload)
		next.Attempt = attempts
	} else if next, err = stage.PodEvent(s.env, pod, attempts, payload); err != nil {
		return err
	}
	if _, err := s.env.Bus.Publish(ctx, next); err != nil {
		return err
	}
	return s.rec.Record(ctx, events.PodRef(pod), events.Warning, eventsv1.ReasonFailedScheduling, msg, next.GetId())
}

// queue adds pod to the unschedulable set and returns its attempt count.
func (s *Stage) queue(pod *corev1.Pod) int32 {
	uid := pod.GetMetadata().GetUid()
	s.qmu.Lock()
	defer s.qmu.Unlock()
	w, ok := s.waiting[uid]
	if !ok {
		w = &waitingPod{ns: pod.GetMetadata().GetNamespace(), name: pod.GetMetadata().GetName()}
		s.waiting[uid] = w
	}
	w.attempts++
	backoff := s.cfg.InitialBackoff << min(w.attempts-1, 16)
	w.next = time.Now().Add(min(backoff, s.cfg.MaxBackoff))
	return w.attempts
}

func (s *Stage) forget(uid string) {
	s.qmu.Lock()
	delete(s.waiting, uid)
	s.qmu.Unlock()
	s.tried.Delete(uid)
}

func (s *Stage) noteConflict(uid string) {
	v, _ := s.conflicts.LoadOrStore(uid, new(atomic.Int32))
	v.(*atomic.Int32).Add(1)
}

func (s *Stage) conflictsOf(uid string) int {
	v, ok := s.conflicts.LoadAndDelete(uid)
	if !ok {
		return 0
	}
	return int(v.(*atomic.Int32).Load())
}

// wake retries unschedulable pods at once (a node appeared or changed, a
// bound pod went away).
func (s *Stage) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// retryLoop retries unschedulable pods when they are due, or at once when
// woken.
func (s *Stage) retryLoop(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			all = true
		case <-t.C:
		}
		now := time.Now()
		type item struct{ uid, ns, name string }
		var due []item
		s.qmu.Lock()
		for uid, w := range s.waiting {
			if all || !now.Before(w.next) {
				due = append(due, item{uid, w.ns, w.name})
			}
		}
		s.qmu.Unlock()
		for _, it := range due {
			if err := s.schedulePod(ctx, it.ns, it.name, it.uid, nil); err != nil && ctx.Err() == nil && s.env.Log != nil {
				s.env.Log.Warn("retry scheduling", "pod", it.ns+"/"+it.name, "err", err)
			}
		}
	}
}

// Reconcile schedules unbound pods that no replica seems to be handling:
// their event was lost, or the replica that had them queued died.
func (s *Stage) Reconcile(ctx context.Context) error {
	now := time.Now()
	var errs []error
	for _, p := range s.pods.List("") {
		if p.GetSpec().GetNodeName() != "" || p.GetMetadata().GetDeletionTimestamp() != nil || !s.responsible(p) {
			continue
		}
		uid := p.GetMetadata().GetUid()
		if t, ok := s.tried.Load(uid); ok && now.Sub(t.(time.Time)) < s.cfg.OrphanAge {
			continue
		}
		if now.Sub(lastAttempt(p)) < s.cfg.OrphanAge {
			continue
		}
		if err := s.schedulePod(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), uid, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lastAttempt is when a scheduler last wrote the pod's PodScheduled
// condition, or its creation.
func lastAttempt(p *corev1.Pod) time.Time {
	t := p.GetMetadata().GetCreationTimestamp().AsTime()
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == "PodScheduled" && c.GetLastTransitionTime() != nil && c.GetLastTransitionTime().AsTime().After(t) {
			t = c.GetLastTransitionTime().AsTime()
		}
	}
	return t
}

func (s *Stage) responsible(p *corev1.Pod) bool {
	n := p.GetSpec().GetSchedulerName()
	return n == "" || n == s.cfg.SchedulerName
}

// maxVerdicts bounds the per-node verdicts an event carries; the message
// already counts every node's reasons.
const maxVerdicts = 100

// verdicts returns up to n per-node verdicts, sorted by node name.
func verdicts(fit *FitError, n int) []*eventsv1.NodeVerdict {
	names := make([]string, 0, len(fit.NodeReasons))
	for node := range fit.NodeReasons {
		names = append(names, node)
	}
	sort.Strings(names)
	if len(names) > n {
		names = names[:n]
	}
	out := make([]*eventsv1.NodeVerdict, len(names))
	for i, node := range names {
		out[i] = &eventsv1.NodeVerdict{Node: node, Reasons: fit.NodeReasons[node]}
	}
	return out
}

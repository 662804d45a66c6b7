package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
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
	// this long (its event was lost). Keep it well above the consumer's
	// AckWait (30s; the events a dead replica held come back after it)
	// and the time a backlog takes to drain, or replicas will reconcile
	// pods whose events are merely queued, duplicating work (safely: the
	// bind transaction arbitrates). Default 1m.
	OrphanAge time.Duration
	// CacheSyncTimeout bounds how long a lost bind race waits for this
	// replica's pod informer to catch up with the allocation that beat it
	// before deciding again. Default 2s.
	CacheSyncTimeout time.Duration
	// MaxAttempts bounds the decide-and-bind attempts of one handling of a
	// pod (each lost race is one); past it the event is retried later
	// with the runner's backoff. Default 16.
	MaxAttempts int
	// InProgressEvery is how often a delivery still being handled is
	// reported in progress, resetting its AckWait: keep it well inside
	// the consumer's AckWait (30s), or a handling slowed past AckWait
	// (a loaded store) has its event delivered again meanwhile, and each
	// such delivery uses one of the consumer's MaxDeliver. Default 5s.
	InProgressEvery time.Duration
}

// DefaultStageConfig returns kube-scheduler's backoffs (1s to 10s).
func DefaultStageConfig() StageConfig {
	return StageConfig{
		Scheduler: DefaultConfig(), SchedulerName: "default-scheduler",
		InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, OrphanAge: time.Minute,
		CacheSyncTimeout: 2 * time.Second, MaxAttempts: 16, InProgressEvery: 5 * time.Second,
	}
}

// Validate checks the StageConfig.
func (c StageConfig) Validate() error {
	if c.InitialBackoff <= 0 || c.MaxBackoff < c.InitialBackoff || c.OrphanAge <= 0 {
		return fmt.Errorf("scheduler: stage config: backoff [%s, %s] and orphan age %s must be positive and ordered", c.InitialBackoff, c.MaxBackoff, c.OrphanAge)
	}
	if c.CacheSyncTimeout <= 0 || c.MaxAttempts < 1 || c.InProgressEvery <= 0 {
		return fmt.Errorf("scheduler: stage config: CacheSyncTimeout (%s) and InProgressEvery (%s) must be positive and MaxAttempts (%d) at least 1", c.CacheSyncTimeout, c.InProgressEvery, c.MaxAttempts)
	}
	if c.SchedulerName == "" {
		return errors.New("scheduler: stage config: SchedulerName is required")
	}
	return c.Scheduler.Validate()
}

// Counters are the stage's running totals, for metrics and tests.
type Counters struct {
	// Scheduled counts binds this replica committed; Unschedulable the
	// attempts that found no node; Conflicts the bind races it lost (a
	// pod or a node allocation changed under it); Errors the attempts
	// that failed otherwise.
	Scheduled, Unschedulable, Conflicts, Errors atomic.Int64
	// Preemptions counts the preemptions this replica committed, Victims
	// the pods they marked for deletion.
	Preemptions, Victims atomic.Int64
	// ReservationsReleased counts the reservations of nominees no longer
	// nominated (deleted) that this replica's sweeps released.
	ReservationsReleased atomic.Int64
}

// Stage is one replica of the scheduler stage. Replicas share the
// PodPersisted consumer; each keeps its own cache of nodes and bound pods
// fed by store watches, decides with the pure Scheduler under one lock
// (assuming the pod onto its node), and binds with a store transaction
// that compares the pod (still unbound) and the node's NodeAllocation
// (still what the decision saw), so that replicas never bind a pod twice or
// overcommit a node. A lost race re-queues the pod at once against the
// state that won.
type Stage struct {
	env   stage.Env
	cfg   StageConfig
	cache *cache.Cache
	rec   *events.Recorder

	mu    sync.Mutex // one scheduling cycle at a time
	sched *Scheduler
	snap  *framework.Snapshot

	nodes  *informer.Informer[*corev1.Node]
	pods   *informer.Informer[*corev1.Pod]
	allocs *informer.Informer[*corev1.NodeAllocation]
	// namespaces feed the cache the namespaces' labels, for pod affinity
	// terms with a namespaceSelector.
	namespaces *informer.Informer[*corev1.Namespace]
	// services feed the cache the Services' selectors, for
	// PodTopologySpread's default constraints.
	services *informer.Informer[*corev1.Service]
	// pdbs feed the cache the PodDisruptionBudgets, which preemption
	// prefers not to violate.
	pdbs *informer.Informer[*corev1.Unstructured]

	podRev   revWaiter                     // revision the pod informer (so the cache) reached
	known    allocations                   // allocations newer than the informer's
	registry atomic.Pointer[guardRegistry] // the guard registry last parsed
	// writer names this process's domain records (the replica's name and
	// a random suffix: a restarted replica is a new writer, so that no
	// bind of its predecessor still in flight goes uncompared).
	writer    string
	bindLocks bindLocks
	lastBinds lastBinds // what this replica knows of its last bind to each node
	inflight  sync.Map  // uid -> chan struct{}: an attempt of this replica is running until it is closed

	qmu     sync.Mutex
	waiting map[string]*waitingPod // unschedulable pods by uid
	sweep   map[string]struct{}    // nodes whose reservations may be stale (a nominee was deleted)
	kick    chan struct{}          // a node or capacity appeared
	wakes   atomic.Int64           // counts wake calls
	tried   sync.Map               // uid -> time of the last attempt by this replica
	started chan struct{}          // closed when Start has synced the caches

	Counters Counters
	metrics  *Metrics
}

type waitingPod struct {
	ns, name string
	attempts int32
	next     time.Time
	// priority (spec.priority) and since (when it was first queued) order
	// the due pods: higher priority first, then the longest waiting.
	priority int32
	since    time.Time
}

func newWaitingPod(pod *corev1.Pod) *waitingPod {
	return &waitingPod{ns: pod.GetMetadata().GetNamespace(), name: pod.GetMetadata().GetName(),
		priority: pod.GetSpec().GetPriority(), since: time.Now()}
}

var (
	_ stage.Starter    = (*Stage)(nil)
	_ stage.Reconciler = (*Stage)(nil)
)

// errInFlight: the pod was still being scheduled by another attempt of
// this replica (a redelivery overtook the first delivery) when the
// handling's ctx ended; retried later.
var errInFlight = errors.New("scheduler: pod is already being scheduled by this replica")

// errTooManyAttempts: every attempt of one handling lost a race.
var errTooManyAttempts = errors.New("scheduler: too many lost bind races")

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
		env: env, cfg: cfg, cache: cache.NewCache(), sched: sched, snap: framework.NewSnapshot(),
		rec:     &events.Recorder{Store: env.Store, Component: cfg.SchedulerName, Instance: env.Replica},
		known:   allocations{overlay: map[string][]*corev1.NodeAllocation{}, pending: map[string]pendingWrite{}},
		waiting: map[string]*waitingPod{}, kick: make(chan struct{}, 1), started: make(chan struct{}),
		writer: newWriterName(env.Replica),
	}
	logErr := func(what string, err error) {
		if err != nil && env.Log != nil {
			env.Log.Warn("scheduler cache", "op", what, "err", err)
		}
	}
	s.nodes, err = informer.New[*corev1.Node](env.Store, "", informer.Handlers[*corev1.Node]{
		OnAdd: func(n *corev1.Node) { logErr("add node", s.cache.AddNode(n)); s.wake() },
		OnUpdate: func(old, n *corev1.Node) {
			logErr("update node", s.cache.UpdateNode(n))
			if nodeMayFitMore(old, n) {
				s.wake()
			}
		},
		OnDelete: func(n *corev1.Node) {
			logErr("remove node", s.cache.RemoveNode(n.GetMetadata().GetName()))
			s.lastBinds.forget(n.GetMetadata().GetName())
		},
	})
	if err != nil {
		return nil, err
	}
	bound := func(p *corev1.Pod) bool { return p.GetSpec().GetNodeName() != "" }
	// Bound pods are cached with what scheduling reads of them only.
	s.pods, err = informer.NewDecoding[*corev1.Pod](env.Store, "", informer.Handlers[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) {
			if bound(p) {
				logErr("add pod", s.cache.AddPod(p))
			} else {
				s.informNomination(p)
			}
			s.podRev.advance(s.pods.Revision())
		},
		OnUpdate: func(old, p *corev1.Pod) {
			if !bound(p) && len(old.GetSpec().GetSchedulingGates()) > 0 && len(p.GetSpec().GetSchedulingGates()) == 0 {
				s.ungated(p)
			}
			s.informNomination(p)
			if bound(p) {
				logErr("update pod", s.cache.UpdatePod(p))
				if cache.Terminal(p) && !cache.Terminal(old) {
					s.wake() // its resources are free
				}
			}
			s.podRev.advance(s.pods.Revision())
		},
		OnDelete: func(p *corev1.Pod) {
			s.cache.Unnominate(p)
			if node := p.GetStatus().GetNominatedNodeName(); node != "" && !bound(p) {
				s.sweepLater(node) // its reservation is left on the node
			}
			if bound(p) {
				if err := s.cache.RemovePod(p); !errors.Is(err, framework.ErrPodNotFound) {
					logErr("remove pod", err)
				}
				s.wake()
				s.nominatedDue(p.GetSpec().GetNodeName())
			}
			s.forget(p.GetMetadata().GetUid())
			s.podRev.advance(s.pods.Revision())
		},
	}, decodeInformedPod)
	if err != nil {
		return nil, err
	}
	s.allocs, err = informer.New[*corev1.NodeAllocation](env.Store, "", informer.Handlers[*corev1.NodeAllocation]{
		OnAdd:    s.known.informed,
		OnUpdate: func(_, a *corev1.NodeAllocation) { s.known.informed(a) },
	})
	if err != nil {
		return nil, err
	}
	// The echo of this replica's own bind is the allocation it wrote:
	// held in the overlay at that revision, or, when the echo comes before
	// the commit's answer, the bind in flight whose very bytes it carries.
	// Taken, not decoded again (a node's allocation accounts for up to all
	// its pods; its decoding was 7 % of the stage's CPU at saturation).
	s.allocs.Reuse(func(kv *raftstore.KV) (*corev1.NodeAllocation, bool) {
		name, ok := strings.CutPrefix(kv.Key, objects.NodeAllocations.Key("", ""))
		if !ok {
			return nil, false
		}
		return s.known.echo(name, kv.ModRevision, kv.Value)
	})
	s.namespaces, err = informer.New[*corev1.Namespace](env.Store, "", informer.Handlers[*corev1.Namespace]{
		OnAdd:    s.cache.SetNamespace,
		OnUpdate: func(_, ns *corev1.Namespace) { s.cache.SetNamespace(ns) },
		OnDelete: func(ns *corev1.Namespace) { s.cache.RemoveNamespace(ns.GetMetadata().GetName()) },
	})
	if err != nil {
		return nil, err
	}
	s.services, err = informer.New[*corev1.Service](env.Store, "", informer.Handlers[*corev1.Service]{
		OnAdd:    s.cache.SetService,
		OnUpdate: func(_, svc *corev1.Service) { s.cache.SetService(svc) },
		OnDelete: func(svc *corev1.Service) {
			s.cache.RemoveService(svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName())
		},
	})
	if err != nil {
		return nil, err
	}
	setPDB := func(u *corev1.Unstructured) {
		b, err := pdbOf(u)
		if err != nil {
			logErr("decode PodDisruptionBudget", err)
			s.cache.RemovePDB(u.GetMetadata().GetNamespace(), u.GetMetadata().GetName())
			return
		}
		s.cache.SetPDB(b)
	}
	s.pdbs, err = informer.NewKind(env.Store, objects.PodDisruptionBudgets, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd:    setPDB,
		OnUpdate: func(_, u *corev1.Unstructured) { setPDB(u) },
		OnDelete: func(u *corev1.Unstructured) {
			s.cache.RemovePDB(u.GetMetadata().GetNamespace(), u.GetMetadata().GetName())
		},
	})
	return s, err
}

// nodeMayFitMore reports whether a node update may let a waiting pod in:
// its spec (unschedulable, taints), labels, allocatable or readiness
// changed. A heartbeat alone does not.
func nodeMayFitMore(old, n *corev1.Node) bool {
	return !vt.Equal(old.GetSpec(), n.GetSpec()) ||
		!maps.Equal(old.GetMetadata().GetLabels(), n.GetMetadata().GetLabels()) ||
		!maps.Equal(old.GetStatus().GetAllocatable(), n.GetStatus().GetAllocatable()) ||
		readyStatus(old) != readyStatus(n)
}

func readyStatus(n *corev1.Node) string {
	return podrules.NodeCondition(n, podrules.NodeReady).GetStatus()
}

// Start runs the informers, waits for their first lists, and starts the
// retry loop of unschedulable pods.
func (s *Stage) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(s.nodes, s.pods, s.allocs, s.namespaces, s.services, s.pdbs)
	if err := infs.Start(ctx, g); err != nil {
		return err
	}
	s.podRev.advance(s.pods.Revision())
	g.Go(func() error { s.retryLoop(ctx); return nil })
	close(s.started)
	return nil
}

// Started is closed once Start has synced the replica's caches: from
// then on it handles events.
func (s *Stage) Started() <-chan struct{} { return s.started }

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
	var hint *corev1.Pod
	if in := env.GetPodPersisted(); in.GetPod().GetMetadata() != nil {
		hint = in.GetPod()
		if objects.Revision(hint) == 0 && in.GetRevision() > 0 {
			hint = vt.Clone(hint)
			objects.SetRevision(hint, in.GetRevision())
		}
	}
	defer keepAlive(d, s.cfg.InProgressEvery)()
	return s.schedulePod(ctx, env.GetNamespace(), env.GetPodName(), env.GetPodUid(), hint, d)
}

// keepAlive reports d in progress every interval until the returned stop
// is called: the event of a handling that outlasts the consumer's AckWait
// (binds queued on a loaded store) is not delivered again while it runs —
// to this replica, where it would only fail with errInFlight and use up
// a delivery, or to another, which would duplicate the work. A replica
// that dies stops reporting, and its events come back after AckWait.
// A timer, not a goroutine: most handlings end before it fires.
func keepAlive(d *bus.Delivery, every time.Duration) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = d.InProgress() // a lost report only risks a redelivery
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// schedulePod runs scheduling attempts for ns/name (of uid, when set)
// until the pod is bound, found unschedulable, gone, or an error ends
// them. hint is a copy of the pod the caller has (the event's), possibly
// stale; d is the delivery that caused the attempt (nil for retries and
// reconciliation).
//
// The first attempt works from the freshest copy at hand — the event's or
// the informer's — without reading the store: the bind transaction's
// compare catches a stale copy. A lost race refreshes exactly what it lost
// on: the pod (a linearizable read), or the node's allocation (a read,
// then waiting for the cache to hold the pods it accounts for).
func (s *Stage) schedulePod(ctx context.Context, ns, name, uid string, hint *corev1.Pod, d *bus.Delivery) error {
	if uid != "" {
		done := make(chan struct{})
		for {
			running, busy := s.inflight.LoadOrStore(uid, done)
			if !busy {
				break
			}
			if d == nil {
				s.retrySoon(uid)
				return nil
			}
			// A redelivery overtook the delivery being handled: wait
			// for that attempt (its outcome is usually the bound pod,
			// which this delivery then only reports) rather than fail,
			// which would use up one of the event's deliveries each time.
			select {
			case <-running.(chan struct{}):
			case <-ctx.Done():
				return fmt.Errorf("%w: %q: %w", errInFlight, ns+"/"+name, ctx.Err())
			}
		}
		defer func() { s.inflight.Delete(uid); close(done) }()
		s.tried.Store(uid, time.Now())
	}
	var conflicts int32
	attemptStart := time.Now()
	fresh := false  // read the pod from the store, not from a copy
	synced := false // waited for the cache to reach a nominated pod's revision
	for attempt := 0; ; attempt++ {
		if attempt == s.cfg.MaxAttempts {
			s.Counters.Errors.Add(1)
			return fmt.Errorf("%w: pod %q, %d attempts", errTooManyAttempts, ns+"/"+name, attempt)
		}
		pod, err := s.readPod(ctx, ns, name, uid, hint, fresh)
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
		if pod.GetMetadata().GetDeletionTimestamp() != nil || cache.Terminal(pod) || !s.responsible(pod) {
			// Being deleted, or finished (kube-scheduler's informer lists
			// no Succeeded or Failed pod): nothing to schedule.
			s.forget(uid)
			return nil
		}
		if node := pod.GetSpec().GetNodeName(); node != "" {
			// Bound already (by us before a crash, or another replica):
			// make sure the node heard of it. Same event id: deduplicated.
			// The Scheduled Event was written with the bind.
			s.forget(uid)
			return s.env.Pub.Publish(ctx, s.scheduledEnvelope(d, pod, node, &eventsv1.PodScheduled{NodeName: node}))
		}

		if len(pod.GetSpec().GetSchedulingGates()) > 0 {
			s.forget(uid)
			return s.gated(ctx, pod)
		}

		wakes := s.wakes.Load() // before the decision's snapshot
		decidedAt := s.podRev.current()
		res, seen, view, err := s.decide(pod)
		var fit *framework.FitError
		// decide held a nomination in the cache: every path but a
		// committed preemption gives it back.
		held := errors.As(err, &fit) && fit.Nomination != nil
		switch {
		case errors.Is(err, framework.ErrPodExists):
			// The cache has the pod bound (or assumed by a bind of ours
			// that committed): our copy is stale.
			if fresh && s.cache.IsAssumed(pod) {
				_ = s.cache.ForgetPod(pod)
			}
			fresh = true
			continue
		case (errors.As(err, &fit) || errors.Is(err, framework.ErrNoNodesAvailable)) && !fresh:
			// Never report a pod unschedulable from a stale copy.
			s.restoreNomination(pod, held)
			fresh = true
			continue
		case errors.As(err, &fit) && fit.Nomination != nil && pod.GetStatus().GetNominatedNodeName() != "" && !synced:
			// Nominated already (by us or another replica): decide on a
			// cache that has the pod's revision, so that it has the
			// victims of that nomination (written in the same
			// transaction) and does not preempt a second time.
			synced = true
			s.restoreNomination(pod, held)
			if _, err := s.podRev.wait(ctx, objects.Revision(pod), s.cfg.CacheSyncTimeout); err != nil {
				return err
			}
			continue
		case errors.As(err, &fit) && fit.Nomination != nil:
			switch outcome, err := s.preempt(ctx, pod, fit.Nomination, fit.Error()); {
			case err != nil:
				s.restoreNomination(pod, held)
				s.Counters.Errors.Add(1)
				return err
			case outcome != preempted:
				s.restoreNomination(pod, held)
				conflicts++
				s.Counters.Conflicts.Add(1)
				continue // fresh already: read the pod again, decide again
			}
			s.observeAttempt("unschedulable", attemptStart)
			return s.unschedulable(ctx, d, pod, fit.Error(), fit, wakes)
		case errors.As(err, &fit):
			if node := pod.GetStatus().GetNominatedNodeName(); node != "" {
				if err := s.requestPreemptedDeletions(ctx, node); err != nil {
					return err
				}
			}
			s.observeAttempt("unschedulable", attemptStart)
			return s.unschedulable(ctx, d, pod, fit.Error(), fit, wakes)
		case errors.Is(err, framework.ErrNoNodesAvailable):
			s.observeAttempt("unschedulable", attemptStart)
			return s.unschedulable(ctx, d, pod, "0/0 nodes are available.", nil, wakes)
		case err != nil:
			s.Counters.Errors.Add(1)
			return bus.Permanent(err)
		}

		payload := &eventsv1.PodScheduled{NodeName: res.Node, FilterNanos: res.FilterDuration.Nanoseconds(), ScoreNanos: res.ScoreDuration.Nanoseconds()}
		next := s.scheduledEnvelope(d, pod, res.Node, payload)
		start := time.Now()
		var stale string
		var written *corev1.Pod
		rev, outcome, err := s.bind(ctx, bindRequest{pod: pod, node: res.Node, seen: seen, view: view, causeID: eventsv1.EventID(next), decidedAt: decidedAt, firstOfGroup: res.FirstOfGroup, stale: &stale, written: &written})
		took := time.Since(start)
		if err != nil || outcome != bound {
			// Every path but a commit forgets the assumption. After an
			// indeterminate commit the pod informer brings the pod back.
			_ = s.cache.ForgetPod(pod)
		}
		if err != nil {
			s.Counters.Errors.Add(1)
			return err
		}
		switch outcome {
		case bound:
			s.forget(uid)
			s.Counters.Scheduled.Add(1)
			s.observeAttempt("scheduled", attemptStart)
			payload.Revision, payload.Conflicts, payload.BindNanos = rev, conflicts, took.Nanoseconds()
			payload.Pod = written // the node agent's copy: no read back
			if d != nil {
				next.HandledEnd = timestamppb.Now()
			}
			return s.env.Pub.Publish(ctx, next)
		case podStale:
			conflicts++
			s.Counters.Conflicts.Add(1)
			fresh = true
		case nodeStale:
			conflicts++
			s.Counters.Conflicts.Add(1)
			if err := s.refreshNode(ctx, res.Node); err != nil {
				return err
			}
		case domainStale:
			conflicts++
			s.Counters.Conflicts.Add(1)
			if err := s.refreshNode(ctx, stale); err != nil {
				return err
			}
		case nodeNotFound:
			// Removed since the decision; the cache follows at once.
		}
	}
}

// restoreNomination gives back the nomination decide held for pod in the
// cache (held): the cache is set again from the pod informer's copy (its
// stored nomination, if any).
func (s *Stage) restoreNomination(pod *corev1.Pod, held bool) {
	if !held {
		return
	}
	if p := s.informed(pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName()); p != nil && p.GetMetadata().GetUid() == pod.GetMetadata().GetUid() {
		s.informNomination(p)
		return
	}
	s.cache.Unnominate(pod)
}

// readPod returns the pod ns/name: from the store when fresh is set or no
// copy of the right uid is at hand, else the newer of hint and the
// informer's copy.
func (s *Stage) readPod(ctx context.Context, ns, name, uid string, hint *corev1.Pod, fresh bool) (*corev1.Pod, error) {
	if !fresh {
		var best *corev1.Pod
		for _, p := range []*corev1.Pod{hint, s.informed(ns, name)} {
			if p == nil || (uid != "" && p.GetMetadata().GetUid() != uid) {
				continue
			}
			if best == nil || objects.Revision(p) > objects.Revision(best) {
				best = p
			}
		}
		if best != nil && objects.Revision(best) > 0 {
			return best, nil
		}
	}
	return objects.Get[*corev1.Pod](ctx, s.env.Store, ns, name)
}

func (s *Stage) informed(ns, name string) *corev1.Pod {
	p, _ := s.pods.Get(ns, name)
	return p
}

// decide runs one scheduling cycle and assumes the pod onto the chosen
// node, under the cycle lock. It returns the pods the cycle saw on the
// node (a stable view: NodeInfo.pods is never modified below its length)
// and the cache's counts of that view.
func (s *Stage) decide(pod *corev1.Pod) (Result, []*framework.PodMeta, nodeView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.UpdateSnapshot(s.snap)
	res, err := s.sched.Schedule(pod, s.snap)
	if fit := (*framework.FitError)(nil); errors.As(err, &fit) && fit.Nomination != nil {
		// Held for the pod until its preemption commits or fails
		// (restoreNomination), as a bind's AssumePod: else the cycles
		// that run meanwhile pick the same node and victims, and all but
		// one of them lose the race.
		_ = s.cache.Nominate(pod, fit.Nomination.NominatedNode)
	}
	if err != nil {
		return res, nil, nodeView{}, err
	}
	var seen []*framework.PodMeta
	var view nodeView
	if n, ok := s.snap.Get(res.Node); ok {
		seen, view = n.Pods(), nodeView{departed: n.Departed(), generation: n.Generation()}
	}
	return res, seen, view, s.cache.AssumePod(pod, res.Node)
}

// scheduledEnvelope is the PodScheduled event of pod's binding to node. Its
// id is the same for every attempt, so that JetStream stores it once.
func (s *Stage) scheduledEnvelope(d *bus.Delivery, pod *corev1.Pod, node string, payload *eventsv1.PodScheduled) *eventsv1.Envelope {
	var next *eventsv1.Envelope
	if d != nil {
		next = d.Next(payload)
	} else {
		next, _ = stage.PodEvent(s.env, pod, 1, payload) // payload is a valid payload type
	}
	next.NodeName, next.PodUid, next.Generation = node, pod.GetMetadata().GetUid(), 1
	return next
}

// unschedulable records why the pod cannot be placed — PodScheduled=False
// with reason Unschedulable, a FailedScheduling event, a PodUnschedulable
// event with every node's verdict — and queues it for a retry.
func (s *Stage) unschedulable(ctx context.Context, d *bus.Delivery, pod *corev1.Pod, msg string, fit *framework.FitError, wakes int64) error {
	s.Counters.Unschedulable.Add(1)
	attempts := s.queue(pod, wakes)
	err := s.markNotScheduled(ctx, pod, eventsv1.ReasonUnschedulable, msg)
	if err != nil {
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
	if err := s.env.Pub.Publish(ctx, next); err != nil {
		return err
	}
	return s.rec.Record(ctx, podrules.PodRef(pod), podrules.EventWarning, eventsv1.ReasonFailedScheduling, msg, next.GetId())
}

// gatedMessage is kube-scheduler's PodScheduled message for a gated pod.
const gatedMessage = "Scheduling is blocked due to non-empty scheduling gates"

// gated records that pod waits for its scheduling gates: PodScheduled=False
// with reason SchedulingGated. It does not enter the queue: the pod
// informer queues it when its last gate is removed (ungated).
func (s *Stage) gated(ctx context.Context, pod *corev1.Pod) error {
	return s.markNotScheduled(ctx, pod, eventsv1.ReasonSchedulingGated, gatedMessage)
}

// markNotScheduled sets the stored pod's PodScheduled=False with reason
// and msg, unless it is another pod of that name now, bound, or (for
// SchedulingGated) no longer gated.
func (s *Stage) markNotScheduled(ctx context.Context, pod *corev1.Pod, reason, msg string) error {
	uid := pod.GetMetadata().GetUid()
	now := timestamppb.Now()
	_, err := objects.Mutate(ctx, s.env.Store, pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), func(p *corev1.Pod) error {
		if p.GetMetadata().GetUid() != uid || p.GetSpec().GetNodeName() != "" ||
			(reason == eventsv1.ReasonSchedulingGated && len(p.GetSpec().GetSchedulingGates()) == 0) {
			return objects.ErrNoChange
		}
		if p.Status == nil {
			p.Status = &corev1.PodStatus{}
		}
		if !podrules.MarkPodCondition(p.Status, podrules.PodScheduled, podrules.ConditionFalse, reason, msg, now) {
			return objects.ErrNoChange
		}
		return nil
	})
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil
	}
	return err
}

// ungated queues a pod whose last scheduling gate was removed, due at once.
// Every replica that sees the update queues it; the bind transaction
// arbitrates.
func (s *Stage) ungated(pod *corev1.Pod) {
	if pod.GetMetadata().GetDeletionTimestamp() != nil || !s.responsible(pod) {
		return
	}
	s.qmu.Lock()
	uid := pod.GetMetadata().GetUid()
	if _, ok := s.waiting[uid]; !ok {
		w := newWaitingPod(pod)
		w.next = w.since
		s.waiting[uid] = w
	}
	s.qmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// queue adds pod to the unschedulable set and returns its attempt count.
// wakes is the wake count read before the decision: if the cluster changed
// since (a wake came during the cycle, which the decision may not have
// seen), the pod is due at once rather than after its backoff.
func (s *Stage) queue(pod *corev1.Pod, wakes int64) int32 {
	uid := pod.GetMetadata().GetUid()
	s.qmu.Lock()
	defer s.qmu.Unlock()
	w, ok := s.waiting[uid]
	if !ok {
		w = newWaitingPod(pod)
		s.waiting[uid] = w
	}
	w.attempts++
	backoff := s.cfg.InitialBackoff << min(w.attempts-1, 16)
	w.next = time.Now().Add(min(backoff, s.cfg.MaxBackoff))
	if s.wakes.Load() != wakes {
		w.next = time.Now()
	}
	return w.attempts
}

// retrySoon makes a waiting pod due at once (a wake found it busy in an
// attempt of this replica, which may have decided before the change).
func (s *Stage) retrySoon(uid string) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if w := s.waiting[uid]; w != nil {
		w.next = time.Now()
	}
}

func (s *Stage) forget(uid string) {
	s.qmu.Lock()
	delete(s.waiting, uid)
	s.qmu.Unlock()
	s.tried.Delete(uid)
}

// sweepLater has the retry loop release the stale reservations on node.
func (s *Stage) sweepLater(node string) {
	s.qmu.Lock()
	if s.sweep == nil {
		s.sweep = map[string]struct{}{}
	}
	s.sweep[node] = struct{}{}
	s.qmu.Unlock()
	s.wake()
}

// wake retries unschedulable pods at once (a node appeared or changed, a
// bound pod went away).
func (s *Stage) wake() {
	s.wakes.Add(1)
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
		var due []dueItem
		s.qmu.Lock()
		for uid, w := range s.waiting {
			if all || !now.Before(w.next) {
				due = append(due, dueItem{uid, w.ns, w.name, w.priority, w.since})
			}
		}
		sweep := s.sweep
		s.sweep = nil
		s.qmu.Unlock()
		if len(sweep) > 0 {
			if err := s.sweepReservations(ctx, slices.Collect(maps.Keys(sweep))); err != nil && ctx.Err() == nil && s.env.Log != nil {
				s.env.Log.Warn("release reservations", "err", err)
			}
		}
		sortDue(due)
		for _, it := range due {
			if err := s.schedulePod(ctx, it.ns, it.name, it.uid, nil, nil); err != nil && ctx.Err() == nil && s.env.Log != nil {
				s.env.Log.Warn("retry scheduling", "pod", it.ns+"/"+it.name, "err", err)
			}
		}
	}
}

// dueItem is a waiting pod due for a retry.
type dueItem struct {
	uid, ns, name string
	priority      int32
	since         time.Time
}

// sortDue orders due pods as kube-scheduler's PrioritySort: higher
// spec.priority first, then the one queued first.
func sortDue(due []dueItem) {
	slices.SortFunc(due, func(a, b dueItem) int {
		if c := cmp.Compare(b.priority, a.priority); c != 0 {
			return c
		}
		return a.since.Compare(b.since)
	})
}

// Reconcile schedules unbound pods that no replica seems to be handling:
// their event was lost, or the replica that had them queued died; and
// releases reservations whose nominee is gone (a deletion this replica
// did not see, or whose sweep failed).
func (s *Stage) Reconcile(ctx context.Context) error {
	now := time.Now()
	errs := []error{s.sweepReservations(ctx, nil)}
	for _, p := range s.pods.List("") {
		if p.GetSpec().GetNodeName() != "" || p.GetMetadata().GetDeletionTimestamp() != nil || cache.Terminal(p) || !s.responsible(p) {
			continue
		}
		uid := p.GetMetadata().GetUid()
		if t, ok := s.tried.Load(uid); ok && now.Sub(t.(time.Time)) < s.cfg.OrphanAge {
			continue
		}
		if now.Sub(lastAttempt(p)) < s.cfg.OrphanAge {
			continue
		}
		if err := s.schedulePod(ctx, p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), uid, p, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lastAttempt is when a scheduler last wrote the pod's PodScheduled
// condition, or its creation.
func lastAttempt(p *corev1.Pod) time.Time {
	t := p.GetMetadata().GetCreationTimestamp().AsTime()
	if c := podrules.PodCondition(p.GetStatus(), podrules.PodScheduled); c.GetLastTransitionTime() != nil && c.GetLastTransitionTime().AsTime().After(t) {
		t = c.GetLastTransitionTime().AsTime()
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
func verdicts(fit *framework.FitError, n int) []*eventsv1.NodeVerdict {
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

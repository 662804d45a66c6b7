package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"k8s.io/apimachinery/pkg/api/resource"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Stage is the Envelope.stage of everything the agent publishes.
const Stage = "nodeagent"

// Publisher publishes one lifecycle event and returns once it is durable
// (a JetStream PubAck). Envelope ids are deterministic, so a retried publish
// is deduplicated. It must be safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, env *eventsv1.Envelope) error
}

// NodeStore is what the agent needs of the store. It must be safe for
// concurrent use. Missing objects are reported with an error matching
// ErrNotFound.
type NodeStore interface {
	// RegisterNode creates node, or replaces the labels, spec and status of
	// an existing node of that name (a restarted agent registers again).
	RegisterNode(ctx context.Context, node *corev1.Node) error
	// UpdateNodeStatus replaces the status of the named node.
	UpdateNodeStatus(ctx context.Context, name string, status *corev1.NodeStatus) error
	// ListNodePods lists the pods whose spec.nodeName is node. Of their
	// status it may leave out all but the phase, conditions and
	// startTime, all the agent reads of it (see workerCopy).
	ListNodePods(ctx context.Context, node string) ([]*corev1.Pod, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// NodeGetter is an optional NodeStore capability: reading the node as the
// store holds it, possibly a little stale (kubelet reads it from the API
// server's cache). At each heartbeat the agent compares the status it
// computes with the stored one and writes only a change (see Heartbeat);
// without NodeGetter it compares with the status it last wrote.
type NodeGetter interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
}

// NodeLister is an optional NodeStore capability: listing every node at
// once, possibly a little stale. sim.Cluster uses it, when its store has
// it, to heartbeat all its nodes after one list (HeartbeatNode). Of each
// node it may hold only the name, resourceVersion and status: all a
// heartbeat reads.
type NodeLister interface {
	ListNodes(ctx context.Context) ([]*corev1.Node, error)
}

// LeaseRenewer is an optional NodeStore capability: renewing the node's
// Lease in kube-node-lease (holder the node, renewTime now, duration),
// kubelet's heartbeat since node leases (its nodelease controller).
type LeaseRenewer interface {
	RenewNodeLease(ctx context.Context, node string, duration time.Duration, now time.Time) error
}

// PodRegistrar is an optional NodeStore capability: keeping the
// ConfigMaps and Secrets of the node's pods at hand, as kubelet's
// ConfigMap and Secret managers do (RegisterPod, UnregisterPod). The agent
// registers each pod before its worker's first step and unregisters it
// (by uid) when the worker is gone.
type PodRegistrar interface {
	RegisterPod(pod *corev1.Pod)
	UnregisterPod(uid string)
}

// PodLister is an optional NodeStore capability: listing the pods of every
// node at once. sim.Cluster uses it, when its store has it, to reconcile all
// its nodes with one list instead of one per node.
type PodLister interface {
	ListPods(ctx context.Context) ([]*corev1.Pod, error)
}

// NodePodsLister is an optional NodeStore capability that sim.Cluster
// prefers to PodLister: listing the pods of every node at once, each
// node's pods decoded only when asked for (pods, safe for concurrent
// use, each call a new decoding), so that a reconcile of thousands of
// nodes holds the decoded pods of the nodes it is reconciling, not the
// whole cluster's. The pods, as ListNodePods', may leave out of their
// status all but its phase, conditions and startTime: an agent reads
// nothing else of a listed pod's status.
type NodePodsLister interface {
	ListPodsByNode(ctx context.Context) (pods func(node string) ([]*corev1.Pod, error), err error)
}

// Agent is one node's kubelet: it registers and heartbeats its Node and
// keeps one worker per pod bound to the node, whose steps its Pool runs
// (no goroutine per pod).
type Agent struct {
	cfg   Config
	rt    Runtime
	store NodeStore
	pub   Publisher
	clock Clock
	log   *slog.Logger
	deps  *workerDeps // what every worker gets; workers never see the Agent

	created time.Time // when the node's conditions last changed

	ctx    context.Context // cancelled by Stop; parent of every worker
	cancel context.CancelFunc
	steps  steps // the workers queued or running in the pool
	closed atomic.Bool

	mu        sync.Mutex
	workers   map[string]*worker // by pod uid
	deleted   *tombstones        // uids whose deletion the agent carried out
	recovered map[string]*recovered
	hbSeq     int64
	// reported is when the node's status was last written (registration
	// included) and reportedStatus what was written, encoded: Heartbeat
	// writes again when the status changed or NodeStatusReportFrequency
	// passed. Encoded, a simulated cluster's thousands of idle nodes keep
	// it as bytes the collector does not scan; it is decoded only when the
	// store's node cannot be read to compare with.
	reported       time.Time
	reportedStatus []byte
	// starts counts the workers ever started; a worker's gen is the count
	// at its start. A store list judges only the workers it can have seen:
	// those started before it began (see ListMark).
	starts uint64
}

type recovered struct {
	sandbox    SandboxInfo
	containers []ContainerInfo
}

// New returns an agent; it does nothing until Start or Run.
func New(cfg Config, rt Runtime, store NodeStore, pub Publisher) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rt == nil || store == nil || pub == nil {
		return nil, fmt.Errorf("%w: runtime, store and publisher are required", ErrInvalidConfig)
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{
		cfg: cfg, rt: rt, store: store, pub: pub, clock: cfg.Clock, created: cfg.Clock.Now(),
		log:     cfg.Logger.With("node", cfg.NodeName),
		ctx:     ctx,
		cancel:  cancel,
		workers: map[string]*worker{}, deleted: agentTombstones(cfg),
		recovered: map[string]*recovered{},
	}
	pool := cfg.Pool
	if pool == nil {
		pool = NewPool(0)
	}
	a.deps = &workerDeps{ctx: ctx, pool: pool, steps: &a.steps, finish: func(w *worker) { a.retire(w, false) },
		cfg: cfg, rt: rt, volumes: store, pub: pub, clock: a.clock, log: a.log,
		allocatable: a.allocatableOf,
		retire:      func(w *worker) { a.retire(w, true) }, ports: newHostPorts()}
	return a, nil
}

// NodeName returns the agent's node name.
func (a *Agent) NodeName() string { return a.cfg.NodeName }

// Start registers the node, learns what the runtime already runs (after an
// agent restart) and reconciles once. It starts no loop: Run does, or the
// caller drives Heartbeat and Reconcile itself (as sim.Cluster does for
// thousands of nodes).
func (a *Agent) Start(ctx context.Context) error {
	if a.closed.Load() {
		return ErrStopped
	}
	node := a.node()
	if err := a.store.RegisterNode(ctx, node); err != nil {
		return fmt.Errorf("register node %q: %w", a.cfg.NodeName, err)
	}
	a.mu.Lock()
	a.reported, a.reportedStatus = a.clock.Now(), encodeNodeStatus(node.GetStatus())
	a.mu.Unlock()
	sbs, err := a.rt.ListSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	for _, sb := range sbs {
		cs, err := a.rt.ListContainers(ctx, sb.PodUID)
		if err != nil {
			return fmt.Errorf("list containers of pod %q: %w", sb.PodUID, err)
		}
		a.mu.Lock()
		if _, owned := a.workers[sb.PodUID]; !owned { // Start called again
			a.recovered[sb.PodUID] = &recovered{sandbox: sb, containers: cs}
		}
		a.mu.Unlock()
	}
	return a.Reconcile(ctx)
}

// Run starts the agent and heartbeats and reconciles until ctx is done; it
// then stops the agent and returns ctx's error.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.Start(ctx); err != nil {
		return err
	}
	defer a.Stop()
	hb := time.NewTicker(a.cfg.HeartbeatInterval)
	defer hb.Stop()
	rs := time.NewTicker(a.cfg.ResyncPeriod)
	defer rs.Stop()
	_ = a.Heartbeat(ctx)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.ctx.Done():
			return ErrStopped
		case <-hb.C:
			if err := a.Heartbeat(ctx); err != nil {
				a.log.Warn("heartbeat", "err", err)
			}
		case <-rs.C:
			if err := a.Reconcile(ctx); err != nil {
				a.log.Warn("reconcile", "err", err)
			}
		}
	}
}

// Stop stops every pod worker and waits for them. Pods keep running in the
// runtime, as containers outlive a kubelet restart; a new agent adopts them.
// Stop is idempotent.
func (a *Agent) Stop() {
	a.mu.Lock() // orders Stop after any startWorkerLocked
	a.closed.Store(true)
	a.mu.Unlock()
	a.steps.stop() // no worker is queued from here on
	a.cancel()
	a.steps.wait()
}

// HandlePodBound starts the pod's worker. It is idempotent: when the pod
// was deleted recently, or has finished (phase Succeeded or Failed) it
// does nothing; when it has a worker, that worker gets the pod update
// (its current labels and annotations, container images and ephemeral
// containers: see podUpdate), unless it changes none of them (a
// reconcile's pod, most often: see worker.update). A pod being deleted
// (deletionTimestamp set) is handed to HandlePodDelete.
func (a *Agent) HandlePodBound(ctx context.Context, pod *corev1.Pod) error {
	return a.handlePodBound(ctx, pod, false)
}

// TakePodBound is HandlePodBound of a pod the caller hands over, one it
// decoded for it: a new worker keeps the pod's own parts, and modifies
// them, instead of copying them (workerTake). The caller must neither
// use nor modify pod afterwards.
func (a *Agent) TakePodBound(ctx context.Context, pod *corev1.Pod) error {
	return a.handlePodBound(ctx, pod, true)
}

// PodTaker is what takes a pod bound to a node over from its caller (see
// Agent.TakePodBound): an Agent, a sim.Cluster.
type PodTaker interface {
	TakePodBound(ctx context.Context, pod *corev1.Pod) error
}

var _ PodTaker = (*Agent)(nil)

func (a *Agent) handlePodBound(ctx context.Context, pod *corev1.Pod, take bool) error {
	if pod.GetSpec().GetNodeName() != a.cfg.NodeName {
		return fmt.Errorf("pod %q on node %q: %w", podKey(pod), pod.GetSpec().GetNodeName(), ErrWrongNode)
	}
	if pod.GetMetadata().GetDeletionTimestamp() != nil {
		return a.HandlePodDelete(ctx, pod, -1)
	}
	uid := pod.GetMetadata().GetUid()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return ErrStopped
	}
	if w, ok := a.workers[uid]; ok {
		if w.update(pod) { // its labels and annotations, images and ephemeral containers may change
			w.kick()
		}
		return nil
	}
	if a.deleted.has(uid) { // its deletion was carried out: a late bind (a stale read) starts nothing
		return nil
	}
	if isTerminalPhase(pod.GetStatus().GetPhase()) {
		return nil // finished before an agent restart: not run again
	}
	a.startWorkerLocked(pod, nil, take)
	return nil
}

// HandlePodDelete terminates the pod gracefully: SIGTERM to its containers,
// a kill after grace, sandbox teardown, then PodDeleted. A negative grace
// uses the pod's deletionGracePeriodSeconds, else its
// terminationGracePeriodSeconds, else Config.DefaultGracePeriod. It returns
// once termination has begun; it is idempotent.
func (a *Agent) HandlePodDelete(ctx context.Context, pod *corev1.Pod, grace time.Duration) error {
	if grace < 0 {
		grace = gracePeriod(pod, &a.cfg)
	}
	uid := pod.GetMetadata().GetUid()
	a.mu.Lock()
	if a.closed.Load() {
		a.mu.Unlock()
		return ErrStopped
	}
	w, ok := a.workers[uid]
	if !ok {
		if a.deleted.has(uid) {
			a.mu.Unlock()
			return nil
		}
		// No worker (never bound here, or left by an earlier agent): a
		// worker still owns the teardown so that the outcome is reported.
		// It starts with the delete queued, so it creates nothing first.
		a.startWorkerLocked(pod, &grace, false)
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	if w.queueDelete(grace) {
		w.kick()
	}
	return nil
}

// PodStatus returns the last status the agent reported for the pod.
func (a *Agent) PodStatus(uid string) (*corev1.PodStatus, bool) {
	a.mu.Lock()
	w, ok := a.workers[uid]
	a.mu.Unlock()
	if !ok {
		return nil, false
	}
	s := w.rep.Reported()
	return s, s != nil
}

// RunningPods counts the pods that have a worker.
func (a *Agent) RunningPods() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.workers)
}

// Reconcile makes the workers match the pods the store binds to this node:
// it starts missing workers, terminates pods that are being deleted or are
// gone from the store, and removes sandboxes no pod owns.
func (a *Agent) Reconcile(ctx context.Context) error {
	mark := a.ListMark()
	pods, err := a.store.ListNodePods(ctx, a.cfg.NodeName)
	if err != nil {
		return fmt.Errorf("list pods of node %q: %w", a.cfg.NodeName, err)
	}
	return a.ReconcilePods(ctx, mark, pods)
}

// ListMark is taken just before the store is listed for ReconcilePods. A
// pod bound while the list is under way may be missing from it: the
// worker the bind started after the mark is not terminated for that.
type ListMark uint64

// ListMark returns the mark of a list that begins now.
func (a *Agent) ListMark() ListMark {
	a.mu.Lock()
	defer a.mu.Unlock()
	return ListMark(a.starts)
}

// ReconcilePods is Reconcile with the pods already listed: pods must be
// every pod the store binds to this node (others are ignored), listed
// after mark was taken. It lets a caller running many agents list the
// store once for all of them.
func (a *Agent) ReconcilePods(ctx context.Context, mark ListMark, pods []*corev1.Pod) error {
	pods = slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool { return p.GetSpec().GetNodeName() != a.cfg.NodeName })
	want := make(map[string]bool, len(pods))
	var errs []error
	for _, pod := range pods {
		uid := pod.GetMetadata().GetUid()
		want[uid] = true
		switch {
		case pod.GetMetadata().GetDeletionTimestamp() != nil:
			errs = append(errs, a.HandlePodDelete(ctx, pod, -1))
		default: // a finished pod without a worker is not started again

			errs = append(errs, a.HandlePodBound(ctx, pod))
		}
	}
	a.mu.Lock()
	var gone []*worker
	for uid, w := range a.workers {
		if !want[uid] && w.gen <= uint64(mark) {
			gone = append(gone, w)
		}
	}
	now := a.clock.Now()
	a.deleted.prune(now) // tombstones outlive redeliveries (see tombstoneTTL)
	orphans := a.recovered
	a.recovered = map[string]*recovered{}
	for uid, r := range orphans {
		if want[uid] {
			a.recovered[uid] = r // not yet claimed by a worker
			delete(orphans, uid)
		}
	}
	a.mu.Unlock()
	for _, w := range gone {
		errs = append(errs, a.HandlePodDelete(ctx, w.pod, -1))
	}
	for uid := range orphans {
		if err := a.rt.StopPodSandbox(ctx, uid); err != nil {
			errs = append(errs, err)
		}
		if err := a.rt.RemovePodSandbox(ctx, uid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Heartbeat renews the node's Lease and reports its status, as kubelet's
// node lease controller and node status loop do (kubelet_node_status.go
// tryUpdateNodeStatus): the Lease is renewed at every heartbeat (when the
// store is a LeaseRenewer); the status is computed, compared with the
// stored node's (a NodeGetter; else with the status the agent last wrote)
// ignoring the conditions' lastHeartbeatTime, and written, with a
// NodeHeartbeat published before, only when it changed or
// NodeStatusReportFrequency has passed since the last write.
func (a *Agent) Heartbeat(ctx context.Context) error {
	g, ok := a.store.(NodeGetter)
	if !ok {
		return a.heartbeat(ctx, nil, false)
	}
	stored, err := g.GetNode(ctx, a.cfg.NodeName)
	switch {
	case errors.Is(err, ErrNotFound):
		return a.heartbeat(ctx, nil, true)
	case err != nil: // compare with what the agent wrote last
		a.log.Debug("heartbeat: read node", "err", err)
		return a.heartbeat(ctx, nil, false)
	}
	return a.heartbeat(ctx, stored, true)
}

// HeartbeatNode is Heartbeat with the node already read from the store
// (nil: the store has none), for a caller heartbeating many nodes after
// one list (sim.Cluster with a NodeLister).
func (a *Agent) HeartbeatNode(ctx context.Context, stored *corev1.Node) error {
	return a.heartbeat(ctx, stored, true)
}

// heartbeat is Heartbeat with stored the node as stored when known.
func (a *Agent) heartbeat(ctx context.Context, stored *corev1.Node, known bool) error {
	now := a.clock.Now()
	var errs []error
	if lr, ok := a.store.(LeaseRenewer); ok {
		errs = append(errs, lr.RenewNodeLease(ctx, a.cfg.NodeName, a.cfg.LeaseDuration, now))
	}
	st := a.nodeStatus(now)
	a.mu.Lock()
	reported, last := a.reportedStatus, a.reported
	a.mu.Unlock()
	var old *corev1.NodeStatus
	switch {
	case known:
		old = stored.GetStatus()
		KeepAdvertised(st, old) // as the store's write does: not a change
	case !last.IsZero():
		old = decodeNodeStatus(reported)
	}
	due := last.IsZero() || now.Sub(last) >= a.cfg.NodeStatusReportFrequency
	if !due && !(known && stored == nil) && !NodeStatusChanged(old, st) {
		return errors.Join(errs...)
	}
	running := a.RunningPods()
	a.mu.Lock()
	a.hbSeq = max(a.hbSeq+1, now.UnixNano())
	seq := a.hbSeq
	a.mu.Unlock()
	env := &eventsv1.Envelope{
		Id:         fmt.Sprintf("node/%s/NodeHeartbeat/g%d/a1", a.cfg.NodeName, seq),
		NodeName:   a.cfg.NodeName,
		Time:       timestamppb.New(now),
		Stage:      Stage,
		Replica:    a.cfg.NodeName,
		Attempt:    1,
		Generation: seq,
		Payload: &eventsv1.Envelope_NodeHeartbeat{NodeHeartbeat: &eventsv1.NodeHeartbeat{
			Conditions: st.Conditions, RunningPods: int32(running),
		}},
	}
	pctx, cancel := publishContext(ctx, a.cfg.PublishTimeout)
	defer cancel()
	errs = append(errs, a.pub.Publish(pctx, env))
	if err := a.store.UpdateNodeStatus(ctx, a.cfg.NodeName, st); err != nil {
		errs = append(errs, err)
	} else {
		a.mu.Lock()
		a.reported, a.reportedStatus = now, encodeNodeStatus(st)
		a.mu.Unlock()
	}
	return errors.Join(errs...)
}

// encodeNodeStatus is st encoded for Agent.reportedStatus; nil when it
// cannot be (the next heartbeat then sees a change and writes).
func encodeNodeStatus(st *corev1.NodeStatus) []byte {
	b, err := st.MarshalVT()
	if err != nil {
		return nil
	}
	return b
}

// decodeNodeStatus is the status encodeNodeStatus encoded; nil when
// there is none.
func decodeNodeStatus(b []byte) *corev1.NodeStatus {
	if b == nil {
		return nil
	}
	st := &corev1.NodeStatus{}
	if err := st.UnmarshalVT(b); err != nil {
		return nil
	}
	return st
}

// NodeStatusChanged reports whether next differs from old in anything but
// the conditions' lastHeartbeatTime, as kubelet's nodeStatusHasChanged
// does (conditions compared by type, whatever their order). It allocates
// nothing when the conditions come in the same order: every simulated
// node calls it at every heartbeat.
func NodeStatusChanged(old, next *corev1.NodeStatus) bool {
	if old == nil || next == nil {
		return old != next
	}
	if !nodeConditionsEqual(old.Conditions, next.Conditions) {
		return true
	}
	// Every field but the conditions (TestNodeStatusChangedSeesEveryField
	// fails when NodeStatus gains one this does not compare).
	o := corev1.NodeStatus{Capacity: old.Capacity, Allocatable: old.Allocatable, Phase: old.Phase,
		Addresses: old.Addresses, NodeInfo: old.NodeInfo, Images: old.Images}
	n := corev1.NodeStatus{Capacity: next.Capacity, Allocatable: next.Allocatable, Phase: next.Phase,
		Addresses: next.Addresses, NodeInfo: next.NodeInfo, Images: next.Images}
	return !o.EqualVT(&n)
}

// nodeConditionsEqual reports whether old and next hold the same
// conditions but for their lastHeartbeatTime, by type whatever their
// order (conditions of one type in the order given).
func nodeConditionsEqual(old, next []*corev1.NodeCondition) bool {
	if len(old) != len(next) {
		return false
	}
	sameOrder := true
	for i := range old {
		if old[i].GetType() != next[i].GetType() {
			sameOrder = false
			break
		}
	}
	if !sameOrder {
		byType := func(x, y *corev1.NodeCondition) int { return strings.Compare(x.GetType(), y.GetType()) }
		old, next = slices.Clone(old), slices.Clone(next)
		slices.SortStableFunc(old, byType)
		slices.SortStableFunc(next, byType)
	}
	for i := range old {
		o, n := old[i], next[i]
		if o.GetType() != n.GetType() || o.GetStatus() != n.GetStatus() || o.GetReason() != n.GetReason() ||
			o.GetMessage() != n.GetMessage() || !sameTime(o.GetLastTransitionTime(), n.GetLastTransitionTime()) {
			return false
		}
	}
	return true
}

// sameTime is Timestamp equality as EqualVT has it: nil equals only nil.
func sameTime(x, y *timestamppb.Timestamp) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.GetSeconds() == y.GetSeconds() && x.GetNanos() == y.GetNanos()
}

// KeepAdvertised keeps in next the capacity old has and the agent does
// not report, as kubelet's MachineInfo setter does (it sets the resources
// it knows and leaves the others): their allocatable is their capacity,
// and an allocatable whose capacity went (a client removed it) goes too.
// A NodeStore applies it to the stored status when it writes the agent's.
func KeepAdvertised(next, old *corev1.NodeStatus) {
	for res, q := range old.GetCapacity() {
		if _, ours := next.GetCapacity()[res]; ours {
			continue
		}
		if next.Capacity == nil {
			next.Capacity = map[string]string{}
		}
		if next.Allocatable == nil {
			next.Allocatable = map[string]string{}
		}
		next.Capacity[res], next.Allocatable[res] = q, q
	}
}

// startWorkerLocked starts the pod's worker, with a delete queued when grace
// is not nil; take: on pod's own parts (workerTake), else on a copy.
func (a *Agent) startWorkerLocked(pod *corev1.Pod, grace *time.Duration, take bool) {
	uid := pod.GetMetadata().GetUid()
	own := workerCopy
	if take {
		own = workerTake
	}
	w := newWorker(a.deps, own(pod), a.recovered[uid])
	a.starts++
	w.gen = a.starts
	if grace != nil {
		w.queueDelete(*grace)
	}
	delete(a.recovered, uid)
	a.workers[uid] = w
	if r, ok := a.store.(PodRegistrar); ok {
		r.RegisterPod(pod)
	}
	w.kick()
}

// retire removes w from the workers; deleted leaves a tombstone so that a
// redelivered bind or delete of the pod is a no-op.
func (a *Agent) retire(w *worker, deleted bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.workers[w.uid] == w {
		delete(a.workers, w.uid)
		a.deps.ports.release(w.uid)
		if r, ok := a.store.(PodRegistrar); ok {
			r.UnregisterPod(w.uid)
		}
	}
	if deleted {
		a.deleted.add(w.uid, a.clock.Now())
	}
}

// gracePeriod is the pod's termination grace: its
// deletionGracePeriodSeconds, else its terminationGracePeriodSeconds, else
// cfg.DefaultGracePeriod.
func gracePeriod(pod *corev1.Pod, cfg *Config) time.Duration {
	if s := pod.GetMetadata().DeletionGracePeriodSeconds; s != nil {
		return time.Duration(*s) * cfg.SpecSecond
	}
	if s := pod.GetSpec().TerminationGracePeriodSeconds; s != nil {
		return time.Duration(*s) * cfg.SpecSecond
	}
	return cfg.DefaultGracePeriod
}

func (a *Agent) capacity() map[string]string {
	if a.cfg.Capacity != nil {
		return maps.Clone(a.cfg.Capacity)
	}
	return maps.Clone(a.rt.Capacity())
}

// allocatable is capacity minus reserved, per resource, floored at zero.
func allocatable(capacity, reserved map[string]string) map[string]string {
	out := maps.Clone(capacity)
	for name, r := range reserved {
		if q, ok := unreserved(capacity[name], r); ok {
			out[name] = q
		}
	}
	return out
}

// unreserved is capacity c minus reserved r, floored at zero; ok is false
// when either is not a quantity (c is then allocatable as it is).
func unreserved(c, r string) (string, bool) {
	cq, err1 := resource.ParseQuantity(c)
	rq, err2 := resource.ParseQuantity(r)
	if err1 != nil || err2 != nil {
		return "", false
	}
	cq.Sub(rq)
	if cq.Sign() < 0 {
		cq = resource.MustParse("0")
	}
	return cq.String(), true
}

// allocatableOf is the node's allocatable quantity of resource name,
// allocatable(a.capacity(), a.cfg.Reserved)[name] without copying either
// map: a pod's worker asks for one resource (memory, for each volume
// kubelet backs with tmpfs) at every mount and volume refresh.
func (a *Agent) allocatableOf(name string) (string, bool) {
	capacity := a.cfg.Capacity
	if capacity == nil {
		capacity = a.rt.Capacity()
	}
	return allocatableOf(capacity, a.cfg.Reserved, name)
}

// allocatableOf is allocatable(capacity, reserved)[name].
func allocatableOf(capacity, reserved map[string]string, name string) (string, bool) {
	c, ok := capacity[name]
	if r, isReserved := reserved[name]; isReserved {
		if q, sub := unreserved(c, r); sub {
			return q, true
		}
	}
	return c, ok
}

func (a *Agent) node() *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": a.cfg.NodeName,
		"kubernetes.io/os":       runtime.GOOS,
		"kubernetes.io/arch":     runtime.GOARCH,
	}
	maps.Copy(labels, a.cfg.Labels)
	return &corev1.Node{
		Metadata: &corev1.ObjectMeta{Name: a.cfg.NodeName, Labels: labels},
		Spec: &corev1.NodeSpec{
			PodCidr:  a.cfg.PodCIDR,
			PodCidrs: []string{a.cfg.PodCIDR},
			Taints:   a.cfg.Taints,
		},
		Status: a.nodeStatus(a.clock.Now()),
	}
}

func (a *Agent) nodeStatus(now time.Time) *corev1.NodeStatus {
	ts, since := timestamppb.New(now), timestamppb.New(a.created)
	cond := func(typ, status, reason, msg string) *corev1.NodeCondition {
		return &corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg,
			LastHeartbeatTime: ts, LastTransitionTime: since}
	}
	capacity := a.capacity()
	st := &corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: allocatable(capacity, a.cfg.Reserved), // a copy
		Conditions: []*corev1.NodeCondition{
			cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
			cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		},
		Addresses: []*corev1.NodeAddress{
			{Type: "InternalIP", Address: a.cfg.HostIP},
			{Type: "Hostname", Address: a.cfg.NodeName},
		},
		NodeInfo: &corev1.NodeSystemInfo{
			OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH,
			KubeletVersion: "podflow", ContainerRuntimeVersion: "podflow://" + Version(),
		},
	}
	if rv, ok := a.rt.(RuntimeVersioner); ok {
		st.NodeInfo.ContainerRuntimeVersion = rv.RuntimeVersion()
	}
	if il, ok := a.rt.(ImageLister); ok {
		st.Images = il.NodeImages()
	}
	return st
}

func podKey(pod *corev1.Pod) string {
	return pod.GetMetadata().GetNamespace() + "/" + pod.GetMetadata().GetName()
}

func isTerminalPhase(p string) bool { return p == "Succeeded" || p == "Failed" }

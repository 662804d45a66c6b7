package nodelifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/events"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// Taint keys the controller manages (k8s.io/api/core/v1).
const (
	TaintNodeNotReady    = "node.kubernetes.io/not-ready"
	TaintNodeUnreachable = "node.kubernetes.io/unreachable"
)

// Taint effects.
const (
	EffectNoExecute  = "NoExecute"
	EffectNoSchedule = "NoSchedule"
)

// Condition texts, as kube-controller-manager writes them.
const (
	ReasonNodeStatusUnknown      = "NodeStatusUnknown"
	ReasonNodeStatusNeverUpdated = "NodeStatusNeverUpdated"
	MessageStoppedPosting        = "Kubelet stopped posting node status."
	MessageNeverPosted           = "Kubelet never posted node status."
	ReasonDeletionByTaintManager = "DeletionByTaintManager"
	MessageDeletionByTaint       = "Taint manager: deleting due to NoExecute taint"
	// DisruptionTarget is the pod condition of a pod about to be deleted
	// by a disruption.
	DisruptionTarget = "DisruptionTarget"
)

// monitoredConditions are set to Unknown when a node goes silent
// (nodeConditionTypes of the node lifecycle controller).
var monitoredConditions = []string{"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}

// Config configures the controller.
type Config struct {
	// GracePeriod: a node silent for longer is Unknown (kube's
	// --node-monitor-grace-period). Default 40s.
	GracePeriod time.Duration
	// MonitorPeriod between passes (kube's --node-monitor-period).
	// Default 5s.
	MonitorPeriod time.Duration
	// Leases, when set, gives the renewTime of node's Lease (false:
	// none); nil follows the Leases of NodeLeaseNamespace with an
	// informer (kube's leaseLister) and reads a node's Lease from the
	// store only before writing the node. A renewal counts as a sign of
	// life as a status heartbeat does.
	Leases func(node string) (time.Time, bool)
	// Election: the replicas elect one leader over a Lease in kube-system
	// (kube-controller-manager's --leader-elect); only the leader passes,
	// the others stand by and take over within LeaseDuration of its death
	// (controller.DefaultElectionConfig: 15s, renew deadline 10s, retry
	// 2s). Its Identity is set from the replica's name when empty.
	Election controller.ElectionConfig
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	el := controller.DefaultElectionConfig(LeaseStage, "")
	el.Identity = "" // New: the replica's
	return Config{GracePeriod: 40 * time.Second, MonitorPeriod: 5 * time.Second, Election: el}
}

// LeaseStage names the election's Lease: kube-system/podflow-nodelifecycle.
const LeaseStage = "nodelifecycle"

// Validate checks the Config.
func (c Config) Validate() error {
	switch {
	case c.GracePeriod <= 0:
		return fmt.Errorf("nodelifecycle: GracePeriod (%s) must be positive", c.GracePeriod)
	case c.MonitorPeriod <= 0:
		return fmt.Errorf("nodelifecycle: MonitorPeriod (%s) must be positive", c.MonitorPeriod)
	case c.MonitorPeriod > c.GracePeriod:
		return fmt.Errorf("nodelifecycle: MonitorPeriod (%s) cannot be longer than GracePeriod (%s)", c.MonitorPeriod, c.GracePeriod)
	}
	el := c.Election
	if el.Identity == "" {
		el.Identity = "replica" // New sets it from the replica's name
	}
	if err := el.Validate(); err != nil {
		return fmt.Errorf("nodelifecycle: %w", err)
	}
	return nil
}

// Controller is the node lifecycle and taint eviction controller.
type Controller struct {
	env      stage.Env
	cfg      Config
	nodes    *informer.Informer[*corev1.Node]
	pods     *informer.Informer[*corev1.Pod]
	leaseInf *informer.Informer[*corev1.Unstructured] // nil with Config.Leases
	renewals renewals                                 // of leaseInf's Leases
	nodeRec  *events.Recorder
	evictRec *events.Recorder
	now      func() time.Time
	leases   leaseFunc // cfg.Leases, or renewals.get
	elector  *controller.Elector
	passed   func(start, end time.Time) // tests: each pass made
}

var _ stage.Starter = (*Controller)(nil)

// New returns a controller acting with env's identity.
func New(env stage.Env, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if env.Log == nil {
		env.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Election.Identity == "" {
		cfg.Election.Identity = env.Replica + "_" + uuid.NewString()
	}
	if cfg.Election.Log == nil {
		cfg.Election.Log = env.Log
	}
	el, err := controller.NewElector(env.Store, cfg.Election)
	if err != nil {
		return nil, fmt.Errorf("nodelifecycle: %w", err)
	}
	// Of a node it reads its identity, taints and conditions (nodeCut).
	nodes, err := informer.NewDecoding(env.Store, "", informer.Handlers[*corev1.Node]{}, decodeNode)
	if err != nil {
		return nil, err
	}
	// Of a pod the controller reads its identity, node, tolerations and
	// Ready condition only (podCutter).
	pods, err := informer.NewDecoding(env.Store, "", informer.Handlers[*corev1.Pod]{}, newPodCutter().decode)
	if err != nil {
		return nil, err
	}
	c := &Controller{env: env, cfg: cfg, nodes: nodes, pods: pods, now: time.Now, elector: el,
		nodeRec:  &events.Recorder{Store: env.Store, Component: "node-controller", Instance: env.Replica},
		evictRec: &events.Recorder{Store: env.Store, Component: "taint-eviction-controller", Instance: env.Replica},
	}
	c.leases = cfg.Leases
	if cfg.Leases == nil {
		c.leases = c.renewals.get
		// kube's leaseLister, of kube-node-lease alone: each renewal is
		// parsed once, as it comes, into renewals, which a pass reads.
		c.renewals.m = map[string]time.Time{}
		c.leaseInf, err = informer.NewKind(env.Store, objects.Leases, NodeLeaseNamespace, informer.Handlers[*corev1.Unstructured]{
			OnAdd:    c.renewals.set,
			OnUpdate: func(_, l *corev1.Unstructured) { c.renewals.set(l) },
			OnDelete: c.renewals.remove,
		})
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// renewals holds the renewTime of every node Lease the Lease informer
// holds, by node: parsed once per renewal, read by every pass.
type renewals struct {
	mu sync.RWMutex
	m  map[string]time.Time
}

func (r *renewals) set(l *corev1.Unstructured) {
	name := l.GetMetadata().GetName()
	t, ok := renewTime(l)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.m[name] = t
	} else {
		delete(r.m, name)
	}
}

func (r *renewals) remove(l *corev1.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, l.GetMetadata().GetName())
}

func (r *renewals) get(node string) (time.Time, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.m[node]
	return t, ok
}

// renewTime is a Lease's spec.renewTime; false when it has none, or one
// that does not parse.
func renewTime(l *corev1.Unstructured) (time.Time, bool) {
	var spec struct {
		Spec struct {
			RenewTime string `json:"renewTime"`
		} `json:"spec"`
	}
	if json.Unmarshal(l.GetContent(), &spec) != nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, spec.Spec.RenewTime)
	return t, err == nil
}

// Start syncs the informers, campaigns for the Lease and, while this
// replica leads, passes every MonitorPeriod until ctx ends. The Lease is
// released only after the last pass ended.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.nodes)
	infs.Add(c.pods)
	if c.leaseInf != nil {
		infs.Add(c.leaseInf)
	}
	if err := infs.Start(ctx, g); err != nil {
		return err
	}
	electCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	g.Go(func() error {
		c.elector.Run(electCtx)
		return nil
	})
	g.Go(func() error {
		defer stopElection()
		t := time.NewTicker(c.cfg.MonitorPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			lctx, leading := c.elector.Leading()
			if !leading {
				continue
			}
			pctx, cancel := context.WithCancel(lctx)
			stop := context.AfterFunc(ctx, cancel)
			start := time.Now()
			if err := c.Pass(pctx); err != nil && pctx.Err() == nil {
				c.env.Log.Warn("node lifecycle pass", "err", err)
			}
			if c.passed != nil {
				c.passed(start, time.Now())
			}
			stop()
			cancel()
		}
	})
	return nil
}

// Leading reports whether this replica holds the Lease now.
func (c *Controller) Leading() bool {
	_, ok := c.elector.Leading()
	return ok
}

// NodeLeaseNamespace holds the nodes' Leases (kubelet's nodelease).
const NodeLeaseNamespace = "kube-node-lease"

// freshLease reads node's Lease from the store: its renewTime, false
// when it has none.
func (c *Controller) freshLease(ctx context.Context, node string) (time.Time, bool, error) {
	obj, err := c.env.Store.GetKind(ctx, objects.Leases, NodeLeaseNamespace, node)
	if errors.Is(err, raftstore.ErrNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("node %q: read its lease: %w", node, err)
	}
	l, ok := obj.(*corev1.Unstructured)
	if !ok {
		return time.Time{}, false, nil
	}
	t, ok := renewTime(l)
	return t, ok, nil
}

// Pass is one pass over every node: health, taints, pods marked, evictions.
func (c *Controller) Pass(ctx context.Context) error {
	now := c.now()
	var errs []error
	// Health and taints of every node; then the pods of those not Ready
	// or tainted NoExecute, the only ones a pass can act on: none, in a
	// healthy cluster, and then the pods are not looked at.
	var acting []*corev1.Node
	for _, n := range c.nodes.List("") {
		node, err := c.monitor(ctx, n, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if notReady(node) || slices.ContainsFunc(node.GetSpec().GetTaints(), func(t *corev1.Taint) bool { return t.GetEffect() == EffectNoExecute }) {
			acting = append(acting, node)
		}
	}
	if len(acting) == 0 {
		return errors.Join(errs...)
	}
	byNode := make(map[string][]*corev1.Pod, len(acting))
	for _, n := range acting {
		byNode[n.GetMetadata().GetName()] = nil
	}
	for _, p := range c.pods.List("") {
		if pods, ok := byNode[p.GetSpec().GetNodeName()]; ok {
			byNode[p.GetSpec().GetNodeName()] = append(pods, p)
		}
	}
	for _, node := range acting {
		pods := byNode[node.GetMetadata().GetName()]
		if notReady(node) {
			errs = append(errs, c.markPodsNotReady(ctx, node, pods))
		}
		errs = append(errs, c.evict(ctx, node, pods, now))
	}
	return errors.Join(errs...)
}

// notReady reports whether the node's Ready condition is not True.
func notReady(n *corev1.Node) bool {
	return podrules.NodeCondition(n, "Ready").GetStatus() != podrules.ConditionTrue
}

// leaseFunc gives the renewTime of node's Lease; false: it has none.
type leaseFunc func(node string) (time.Time, bool)

// lastSeen is the node's last sign of life: its Ready heartbeat or its
// Lease's renewal, whichever is later (zero: never).
func lastSeen(n *corev1.Node, leases leaseFunc) time.Time {
	var t time.Time
	if hb := podrules.NodeCondition(n, "Ready").GetLastHeartbeatTime(); hb != nil {
		t = hb.AsTime()
	}
	if leases != nil {
		if r, ok := leases(n.GetMetadata().GetName()); ok && r.After(t) {
			t = r
		}
	}
	if t.IsZero() && n.GetMetadata().GetCreationTimestamp() != nil {
		return n.GetMetadata().GetCreationTimestamp().AsTime() // as kube's probeTimestamp starts
	}
	return t
}

// monitor marks a silent node's conditions Unknown and reconciles its
// taints with its Ready condition, with compare-and-swap on a fresh read;
// it returns the node as stored. As kube's tryUpdateNodeHealth, it
// decides on the informers' copies of the node and its Lease first: a
// node that needs nothing (a live node with its taints right, the usual
// case) is not read again, nor is its Lease. One that seems to need a
// write is decided again on fresh reads of both, so that a renewal the
// Lease informer has not seen yet never marks a live node Unknown.
func (c *Controller) monitor(ctx context.Context, n *corev1.Node, now time.Time) (*corev1.Node, error) {
	name := n.GetMetadata().GetName()
	if !c.needsWrite(n, now, c.leases) {
		return n, nil
	}
	leases := c.leases
	if c.leaseInf != nil {
		t, ok, err := c.freshLease(ctx, name)
		if err != nil {
			return nil, err
		}
		leases = func(string) (time.Time, bool) { return t, ok }
	}
	var wentUnknown bool
	out, err := objects.Mutate(ctx, c.env.Store, "", name, func(n *corev1.Node) error {
		var changed bool
		wentUnknown, changed = c.health(n, now, leases)
		if !changed {
			return objects.ErrNoChange
		}
		return nil
	})
	if errors.Is(err, raftstore.ErrNotFound) {
		return n, nil
	}
	if err != nil {
		return nil, fmt.Errorf("node %q: %w", name, err)
	}
	if wentUnknown {
		ref := &corev1.ObjectReference{Kind: "Node", Name: name, Uid: out.GetMetadata().GetUid()}
		_ = c.nodeRec.Record(ctx, ref, podrules.EventNormal, "NodeNotReady", fmt.Sprintf("Node %s status is now: NodeNotReady", name), "")
		c.env.Log.Info("node stopped posting status", "node", name, "lastSeen", lastSeen(n, leases))
	}
	return out, nil
}

// health marks n's conditions Unknown when it is silent past the grace
// period (its heartbeat and its Lease in leases) and reconciles its
// taints; it reports whether Ready went Unknown, and whether n changed.
func (c *Controller) health(n *corev1.Node, now time.Time, leases leaseFunc) (wentUnknown, changed bool) {
	if now.Sub(lastSeen(n, leases)) > c.cfg.GracePeriod {
		wentUnknown, changed = MarkUnknown(n, now)
	}
	if ReconcileTaints(n, now) {
		changed = true
	}
	return wentUnknown, changed
}

// needsWrite reports whether health would change n, without changing
// it (n is the informer's, shared): a node silent past the grace period
// with a monitored condition not Unknown yet, or managed taints that
// are not WantedTaints of its Ready condition (Unknown, when silent).
func (c *Controller) needsWrite(n *corev1.Node, now time.Time, leases leaseFunc) bool {
	ready := podrules.NodeCondition(n, "Ready").GetStatus()
	if now.Sub(lastSeen(n, leases)) > c.cfg.GracePeriod {
		for _, typ := range monitoredConditions {
			if podrules.NodeCondition(n, typ).GetStatus() != podrules.ConditionUnknown {
				return true
			}
		}
		ready = podrules.ConditionUnknown
	}
	want := wantedTaints(ready)
	for _, t := range n.GetSpec().GetTaints() {
		if !managed(t) {
			continue
		}
		if !slices.ContainsFunc(want, func(w *corev1.Taint) bool { return sameTaint(w, t) }) {
			return true
		}
	}
	// Every managed taint is wanted; is every wanted one there?
	for _, w := range want {
		if !slices.ContainsFunc(n.GetSpec().GetTaints(), func(t *corev1.Taint) bool { return sameTaint(w, t) }) {
			return true
		}
	}
	return false
}

// MarkUnknown sets the node's monitored conditions to Unknown, as the node
// lifecycle controller does for a node silent past the grace period; it
// reports whether Ready went from known to Unknown, and whether anything
// changed.
func MarkUnknown(n *corev1.Node, now time.Time) (wentUnknown, changed bool) {
	ts := timestamppb.New(now)
	if n.Status == nil {
		n.Status = &corev1.NodeStatus{}
	}
	for _, typ := range monitoredConditions {
		c := podrules.NodeCondition(n, typ)
		if c == nil {
			n.Status.Conditions = append(n.Status.Conditions, &corev1.NodeCondition{Type: typ, Status: podrules.ConditionUnknown,
				Reason: ReasonNodeStatusNeverUpdated, Message: MessageNeverPosted, LastHeartbeatTime: ts, LastTransitionTime: ts})
			changed = true
			wentUnknown = wentUnknown || typ == "Ready"
			continue
		}
		if c.GetStatus() == podrules.ConditionUnknown {
			continue
		}
		c.Status, c.Reason, c.Message, c.LastTransitionTime = podrules.ConditionUnknown, ReasonNodeStatusUnknown, MessageStoppedPosting, ts
		changed = true
		wentUnknown = wentUnknown || typ == "Ready"
	}
	return wentUnknown, changed
}

// WantedTaints are the taints the Ready condition calls for: not-ready
// for False, unreachable for Unknown, each NoExecute and NoSchedule;
// none for True.
func WantedTaints(n *corev1.Node) []*corev1.Taint {
	return wantedTaints(podrules.NodeCondition(n, "Ready").GetStatus())
}

// wantedTaints are the taints a Ready condition of status ready calls
// for (WantedTaints).
func wantedTaints(ready string) []*corev1.Taint {
	var key string
	switch ready {
	case podrules.ConditionFalse:
		key = TaintNodeNotReady
	case podrules.ConditionUnknown:
		key = TaintNodeUnreachable
	default:
		return nil
	}
	return []*corev1.Taint{{Key: key, Effect: EffectNoExecute}, {Key: key, Effect: EffectNoSchedule}}
}

// managed reports whether t is a taint the controller sets from the
// Ready condition.
func managed(t *corev1.Taint) bool {
	return (t.GetKey() == TaintNodeNotReady || t.GetKey() == TaintNodeUnreachable) &&
		(t.GetEffect() == EffectNoExecute || t.GetEffect() == EffectNoSchedule)
}

// sameTaint reports whether a and b are one taint: key and effect.
func sameTaint(a, b *corev1.Taint) bool {
	return a.GetKey() == b.GetKey() && a.GetEffect() == b.GetEffect()
}

// ReconcileTaints makes the node's managed taints WantedTaints: a taint
// kept keeps its timeAdded, one added gets now. It reports a change.
func ReconcileTaints(n *corev1.Node, now time.Time) bool {
	want := WantedTaints(n)
	if n.Spec == nil {
		n.Spec = &corev1.NodeSpec{}
	}
	changed := false
	kept := n.Spec.Taints[:0:0]
	for _, t := range n.Spec.Taints {
		if managed(t) && !slices.ContainsFunc(want, func(w *corev1.Taint) bool { return sameTaint(w, t) }) {
			changed = true
			continue
		}
		kept = append(kept, t)
	}
	for _, w := range want {
		if !slices.ContainsFunc(kept, func(t *corev1.Taint) bool { return sameTaint(w, t) }) {
			w.TimeAdded = timestamppb.New(now)
			kept = append(kept, w)
			changed = true
		}
	}
	if changed {
		n.Spec.Taints = kept
	}
	return changed
}

// markPodsNotReady sets the Ready condition of every pod of node that has
// one to False, as MarkPodsNotReady does.
func (c *Controller) markPodsNotReady(ctx context.Context, node *corev1.Node, pods []*corev1.Pod) error {
	var errs []error
	for _, p := range pods {
		if cond := podrules.PodCondition(p.GetStatus(), podrules.PodReady); cond == nil || cond.GetStatus() == podrules.ConditionFalse {
			continue
		}
		md := p.GetMetadata()
		marked := false
		_, err := objects.Mutate(ctx, c.env.Store, md.GetNamespace(), md.GetName(), func(p *corev1.Pod) error {
			cond := podrules.PodCondition(p.GetStatus(), podrules.PodReady)
			if p.GetMetadata().GetUid() != md.GetUid() || p.GetSpec().GetNodeName() != node.GetMetadata().GetName() || cond == nil || cond.GetStatus() == podrules.ConditionFalse {
				return objects.ErrNoChange
			}
			cond.Status, cond.LastTransitionTime = podrules.ConditionFalse, timestamppb.New(c.now())
			marked = true
			return nil
		})
		if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			errs = append(errs, fmt.Errorf("mark pod %s/%s not ready: %w", md.GetNamespace(), md.GetName(), err))
			continue
		}
		if marked {
			ref := &corev1.ObjectReference{Kind: "Pod", Namespace: md.GetNamespace(), Name: md.GetName(), Uid: md.GetUid()}
			_ = c.nodeRec.Record(ctx, ref, podrules.EventWarning, "NodeNotReady", "Node is not ready", "")
		}
	}
	return errors.Join(errs...)
}

// EvictionTime says when a pod with tolerations is to be evicted from a
// node with taints: at once (zero time, true) when it does not tolerate
// every NoExecute taint; at the earliest timeAdded plus the smallest
// tolerationSeconds of the tolerations that match them; never (false)
// when none of those says how long, or there is no NoExecute taint.
func EvictionTime(tols []*corev1.Toleration, taints []*corev1.Taint) (time.Time, bool) {
	var at time.Time
	found := false
	for _, t := range taints {
		if t.GetEffect() != EffectNoExecute {
			continue
		}
		secs := int64(math.MaxInt64)
		tolerated := false
		for _, tol := range tols {
			if !toleratesTaint(tol, t) {
				continue
			}
			tolerated = true
			if tol.TolerationSeconds != nil {
				secs = min(secs, max(*tol.TolerationSeconds, 0))
			}
		}
		if !tolerated {
			return time.Time{}, true
		}
		if secs == math.MaxInt64 {
			continue // tolerated forever
		}
		added := t.GetTimeAdded().AsTime()
		if t.GetTimeAdded() == nil {
			added = time.Time{}
		}
		when := added.Add(time.Duration(secs) * time.Second)
		if !found || when.Before(at) {
			at, found = when, true
		}
	}
	return at, found
}

// toleratesTaint is Kubernetes' Toleration.ToleratesTaint: an empty
// effect matches every effect, an empty key (operator Exists) every key,
// an empty operator is Equal.
func toleratesTaint(tol *corev1.Toleration, t *corev1.Taint) bool {
	if e := tol.GetEffect(); e != "" && e != t.GetEffect() {
		return false
	}
	if k := tol.GetKey(); k != "" && k != t.GetKey() {
		return false
	}
	switch tol.GetOperator() {
	case "", "Equal":
		return tol.GetValue() == t.GetValue()
	case "Exists":
		return true
	}
	return false
}

// evict evicts the pods of node whose time has come.
func (c *Controller) evict(ctx context.Context, node *corev1.Node, pods []*corev1.Pod, now time.Time) error {
	var errs []error
	for _, p := range pods {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		at, ok := EvictionTime(p.GetSpec().GetTolerations(), node.GetSpec().GetTaints())
		if !ok || now.Before(at) {
			continue
		}
		if err := c.evictPod(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// evictPod deletes p as the taint eviction controller does: the condition
// DisruptionTarget, then a graceful deletion, and an Event.
func (c *Controller) evictPod(ctx context.Context, p *corev1.Pod) error {
	md := p.GetMetadata()
	_, err := objects.Mutate(ctx, c.env.Store, md.GetNamespace(), md.GetName(), func(p *corev1.Pod) error {
		if p.GetMetadata().GetUid() != md.GetUid() {
			return raftstore.ErrNotFound
		}
		if p.Status == nil {
			p.Status = &corev1.PodStatus{}
		}
		if !podrules.MarkPodCondition(p.Status, DisruptionTarget, podrules.ConditionTrue, ReasonDeletionByTaintManager, MessageDeletionByTaint, timestamppb.New(c.now())) {
			return objects.ErrNoChange
		}
		return nil
	})
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("evict pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	if _, err := stage.DeletePod(ctx, c.env, md.GetNamespace(), md.GetName(), nil); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		return fmt.Errorf("evict pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	ref := &corev1.ObjectReference{Kind: "Pod", Namespace: md.GetNamespace(), Name: md.GetName(), Uid: md.GetUid()}
	_ = c.evictRec.Record(ctx, ref, podrules.EventNormal, "TaintManagerEviction", fmt.Sprintf("Marking for deletion Pod %s/%s", md.GetNamespace(), md.GetName()), "")
	c.env.Log.Info("evicted a pod from a tainted node", "pod", md.GetNamespace()+"/"+md.GetName(), "node", p.GetSpec().GetNodeName())
	return nil
}

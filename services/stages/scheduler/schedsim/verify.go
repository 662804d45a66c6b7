package schedsim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// Report is what Verify found.
type Report struct {
	// Pods in the store, Bound to a node, Unbound.
	Pods, Bound, Unbound int
	// Binds counts the writes in the store's history that set a pod's
	// spec.nodeName (each pod at most once when all is well).
	Binds int
	// AllocationWrites counts NodeAllocation writes checked in the history.
	AllocationWrites int
	// Nominations counts the writes that nominated a pod to a node
	// (status.nominatedNodeName set), Victims the pods a preemption marked
	// for deletion (DisruptionTarget, PreemptionByScheduler).
	Nominations, Victims int
	// NominatedUnbound lists the pods nominated in the history that are
	// in the store, unbound, at the end; VictimsLeft the victims still in
	// the store at the end (both empty once every preemption has run its
	// course).
	NominatedUnbound, VictimsLeft []string
	// AntiAffinityChecks counts the required anti-affinity terms checked
	// at bindings (the pod's own and the bound pods'), SpreadChecks the
	// DoNotSchedule constraints.
	AntiAffinityChecks, SpreadChecks int
	// AffinityChecks counts the required pod affinity terms checked at
	// bindings.
	AffinityChecks int
	// SpreadSkews lists the bindings whose DoNotSchedule spread skew the
	// store's state at their revision exceeds when replicas run more than
	// one handler at a time, where that is not proof of a violation (see
	// topology.go); with Config.Concurrency 1 they are Violations.
	SpreadSkews []string
	// AffinityUnmet lists, likewise, the bindings whose required pod
	// affinity the store's state at their revision does not satisfy.
	AffinityUnmet []string
	// Violations lists every broken invariant (at most maxViolations).
	Violations []string

	nominated map[string]string // pod key -> node it was last nominated to
	victims   map[string]string // pod key -> uid of the victim
}

const maxViolations = 20

func (r *Report) violate(format string, args ...any) {
	if len(r.Violations) < maxViolations {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

// Err returns ErrInvariant with the violations, or nil.
func (r *Report) Err() error {
	if len(r.Violations) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n  %s", ErrInvariant, strings.Join(r.Violations, "\n  "))
}

// verifyCarried checks the pod a PodScheduled carries for the node agent:
// the bind's own write, at the bind's revision — bound to the node the
// store has, the stored pod's uid, and the stored pod itself while no
// later write changed it.
func (e *Env) verifyCarried(rep *Report, stored *corev1.Pod, ps *eventsv1.PodScheduled) {
	c := ps.GetPod()
	switch {
	case c == nil && ps.GetRevision() > 0:
		rep.violate("pod %s: the PodScheduled of its bind at %d carries no pod", podKey(stored), ps.GetRevision())
	case c == nil:
	case ps.GetRevision() <= 0:
		rep.violate("pod %s: a PodScheduled without the bind's revision carries a pod", podKey(stored))
	case objects.Revision(c) != ps.GetRevision():
		rep.violate("pod %s: PodScheduled at %d carries the pod at %d", podKey(stored), ps.GetRevision(), objects.Revision(c))
	case c.GetMetadata().GetUid() != stored.GetMetadata().GetUid() || c.GetSpec().GetNodeName() != stored.GetSpec().GetNodeName():
		rep.violate("pod %s: PodScheduled carries uid %s on %q, the store has %s on %q", podKey(stored),
			c.GetMetadata().GetUid(), c.GetSpec().GetNodeName(), stored.GetMetadata().GetUid(), stored.GetSpec().GetNodeName())
	case objects.Revision(stored) == ps.GetRevision() && !proto.Equal(c, stored):
		rep.violate("pod %s: PodScheduled carries a pod other than the one its bind stored at %d", podKey(stored), ps.GetRevision())
	}
}

// markerKey is written by Verify to know where the history it reads ends.
const markerKey = "/registry/schedsim/marker"

// Verify checks the scheduler's invariants on the store's whole history
// since Start and on its final state, and against the event stream:
//
//   - a pod's spec.nodeName is set once and never changes (no double
//     binding), in every revision of the history;
//   - every NodeAllocation ever written fits its node's allocatable (cpu,
//     memory, pod count, the scalar resources such as extended resources)
//     — no overcommit at any revision;
//   - finally, the pods bound to each node fit it, each node's
//     NodeAllocation accounts for exactly the pods bound to it, with their
//     requests, and no pod is accounted on two nodes; a pod that
//     Succeeded or Failed counts on no node (its record may still hold
//     it, until the next bind there, when another writer than the status
//     stage made it terminal);
//   - every bound pod has exactly one Scheduled Event, and the
//     PodScheduled events in the stream name the node it is bound to;
//   - every binding in the history passes the pod's required pod
//     anti-affinity, the required anti-affinity of the pods bound then
//     (symmetry), the pod's required pod affinity, and its DoNotSchedule
//     topology spread constraints, evaluated against the pods bound and
//     the nodes there at the revision of that binding (topology.go; the
//     spread and affinity checks are violations only with
//     Config.Concurrency 1, else they are reported in SpreadSkews and
//     AffinityUnmet);
//   - preemption: an unbound pod is never nominated to a second node (no
//     double nomination), and a pod is marked a preemption's victim only
//     in the same transaction that nominates a pod to its node (no victim
//     without its preemptor). The pods nominated and the victims that are
//     still there at the end are reported (NominatedUnbound, VictimsLeft);
//     finally, every reservation in a NodeAllocation (scheduler.Reservations)
//     belongs to a pod that is unbound and nominated to that node, and
//     every such pod has its reservation there.
//
// Violations are in the Report; the error is for failures to read.
func (e *Env) Verify(ctx context.Context) (*Report, error) {
	rep := &Report{}
	nodes, _, err := objects.List[*corev1.Node](ctx, e.Store, "")
	if err != nil {
		return nil, err
	}
	alloc := map[string]framework.Resources{}
	scalarAlloc := map[string]framework.Scalars{}
	for _, n := range nodes {
		a, err := framework.NodeAllocatable(n)
		if err != nil {
			return nil, err
		}
		alloc[n.GetMetadata().GetName()] = a
		if scalarAlloc[n.GetMetadata().GetName()], err = framework.NodeScalars(n); err != nil {
			return nil, err
		}
	}
	if err := e.verifyHistory(ctx, rep, alloc, scalarAlloc); err != nil {
		return nil, err
	}

	pods, _, err := objects.List[*corev1.Pod](ctx, e.Store, "")
	if err != nil {
		return nil, err
	}
	allocs, _, err := objects.List[*corev1.NodeAllocation](ctx, e.Store, "")
	if err != nil {
		return nil, err
	}
	evs, _, err := objects.List[*corev1.Event](ctx, e.Store, "")
	if err != nil {
		return nil, err
	}
	scheduledEvents := map[string]int{}
	for _, ev := range evs {
		if ev.GetReason() == eventsv1.ReasonScheduled {
			scheduledEvents[ev.GetInvolvedObject().GetUid()]++
		}
	}
	for _, p := range pods {
		switch {
		case rep.nominated[podKey(p)] != "" && p.GetSpec().GetNodeName() == "":
			rep.NominatedUnbound = append(rep.NominatedUnbound, podKey(p))
		case rep.victims[podKey(p)] == p.GetMetadata().GetUid():
			rep.VictimsLeft = append(rep.VictimsLeft, podKey(p))
		}
	}
	used := map[string]framework.Resources{}
	usedScalars := map[string]framework.Scalars{}
	podScalars := map[string]framework.Scalars{}          // uid -> scalar requests
	onNode := map[string]map[string]framework.Resources{} // node -> uid -> requests
	finished := map[string]string{}                       // uid -> node of the bound pods that Succeeded or Failed
	for _, p := range pods {
		rep.Pods++
		node := p.GetSpec().GetNodeName()
		uid := p.GetMetadata().GetUid()
		if node == "" {
			rep.Unbound++
			continue
		}
		rep.Bound++
		if n := scheduledEvents[uid]; n != 1 {
			rep.violate("pod %s (uid %s) bound to %s has %d Scheduled Events", podKey(p), uid, node, n)
		}
		if e.Scheduled != nil {
			for _, env := range e.Scheduled.Events(uid) {
				if got := env.GetPodScheduled().GetNodeName(); got != node {
					rep.violate("pod %s bound to %s in the store, PodScheduled says %s", podKey(p), node, got)
				}
				e.verifyCarried(rep, p, env.GetPodScheduled())
			}
		}
		if cache.Terminal(p) {
			finished[uid] = node
			continue
		}
		req, _, err := framework.PodRequests(p)
		if err != nil {
			return nil, err
		}
		u := used[node]
		u.MilliCPU, u.Memory, u.Pods = u.MilliCPU+req.MilliCPU, u.Memory+req.Memory, u.Pods+1
		used[node] = u
		scalars, err := framework.PodScalars(p)
		if err != nil {
			return nil, err
		}
		usedScalars[node] = addScalars(usedScalars[node], scalars)
		podScalars[uid] = scalars
		if onNode[node] == nil {
			onNode[node] = map[string]framework.Resources{}
		}
		onNode[node][uid] = req
	}
	for node, u := range used {
		if a, ok := alloc[node]; ok && !fits(u, a) {
			rep.violate("node %s overcommitted: pods request %+v of allocatable %+v", node, u, a)
		}
	}
	for node, u := range usedScalars {
		if over := scalarsOver(u, scalarAlloc[node]); over != "" {
			rep.violate("node %s overcommitted: pods request %s", node, over)
		}
	}
	accounted := map[string]string{} // uid -> node
	for _, a := range allocs {
		node := a.GetMetadata().GetName()
		for uid, ap := range a.GetPods() {
			if other, ok := accounted[uid]; ok {
				rep.violate("pod uid %s accounted on %s and %s", uid, other, node)
			}
			accounted[uid] = node
			req, ok := onNode[node][uid]
			if !ok && finished[uid] == node {
				continue
			}
			if !ok {
				rep.violate("NodeAllocation %s accounts pod %s/%s (uid %s) that is not bound to it", node, ap.GetNamespace(), ap.GetName(), uid)
				continue
			}
			if req.MilliCPU != ap.GetMilliCpu() || req.Memory != ap.GetMemoryBytes() {
				rep.violate("NodeAllocation %s accounts pod uid %s as %dm/%d, it requests %dm/%d", node, uid, ap.GetMilliCpu(), ap.GetMemoryBytes(), req.MilliCPU, req.Memory)
			}
			if !maps.Equal(ap.GetScalarResources(), podScalars[uid]) {
				rep.violate("NodeAllocation %s accounts pod uid %s as %v of the scalar resources, it requests %v", node, uid, ap.GetScalarResources(), podScalars[uid])
			}
		}
	}
	for node, uids := range onNode {
		for uid := range uids {
			if accounted[uid] != node {
				rep.violate("pod uid %s bound to %s is not in its NodeAllocation", uid, node)
			}
		}
	}
	if err := verifyReservations(rep, pods, allocs); err != nil {
		return nil, err
	}
	return rep, nil
}

// verifyReservations checks that the reservations in the allocation
// records are exactly the nominations of the unbound pods.
func verifyReservations(rep *Report, pods []*corev1.Pod, allocs []*corev1.NodeAllocation) error {
	nominee := map[string]*corev1.Pod{} // uid -> unbound pod nominated to a node
	for _, p := range pods {
		if p.GetSpec().GetNodeName() == "" && p.GetStatus().GetNominatedNodeName() != "" {
			nominee[p.GetMetadata().GetUid()] = p
		}
	}
	reserved := map[string]string{} // uid -> node
	for _, a := range allocs {
		node := a.GetMetadata().GetName()
		res, err := cache.Reservations(a)
		if err != nil {
			return err
		}
		for uid, r := range res {
			reserved[uid] = node
			if p := nominee[uid]; p == nil || p.GetStatus().GetNominatedNodeName() != node {
				rep.violate("NodeAllocation %s reserves room for pod %s/%s (uid %s), which is not nominated to it", node, r.Pod.GetNamespace(), r.Pod.GetName(), uid)
			}
		}
	}
	for uid, p := range nominee {
		if node := p.GetStatus().GetNominatedNodeName(); reserved[uid] != node {
			rep.violate("pod %s is nominated to %s without a reservation there", podKey(p), node)
		}
	}
	return nil
}

// addScalars returns into (allocated when nil) with s added.
func addScalars(into framework.Scalars, s map[string]int64) framework.Scalars {
	for k, v := range s {
		if into == nil {
			into = framework.Scalars{}
		}
		into[k] += v
	}
	return into
}

// scalarsOver names, in name order, the scalar resources used asks more of
// than allocatable offers ("" when none).
func scalarsOver(used, allocatable framework.Scalars) string {
	var over []string
	for _, k := range slices.Sorted(maps.Keys(used)) {
		if used[k] > allocatable[k] {
			over = append(over, fmt.Sprintf("%d %s of %d", used[k], k, allocatable[k]))
		}
	}
	return strings.Join(over, ", ")
}

func fits(used, allocatable framework.Resources) bool {
	return used.MilliCPU <= allocatable.MilliCPU && used.Memory <= allocatable.Memory && used.Pods <= allocatable.Pods
}

func podKey(p *corev1.Pod) string {
	return p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()
}

// verifyHistory replays every write since Start.
func (e *Env) verifyHistory(ctx context.Context, rep *Report, allocatable map[string]framework.Resources, scalarAlloc map[string]framework.Scalars) error {
	kv := e.Store.Client()
	marker, err := kv.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: markerKey, Value: []byte("x")}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kv.Watch(ctx, "/registry/", e.startRev)
	if err != nil {
		return err
	}
	defer w.Stop()
	type podState struct{ uid, node string }
	pods := map[string]podState{} // key -> last state
	rep.nominated, rep.victims = map[string]string{}, map[string]string{}
	nominatedAt := map[string]map[int64]bool{} // node -> revisions that nominated a pod to it
	type victimMark struct {
		key, node string
		rev       int64
	}
	var markedAt []victimMark
	checkVictims := func() {
		for _, m := range markedAt {
			if !nominatedAt[m.node][m.rev] {
				rep.violate("pod %s marked a preemption victim on %s at revision %d with no pod nominated to the node in that transaction", m.key, m.node, m.rev)
			}
		}
	}
	topo := newTopology(e.cfg.Concurrency == 1)
	podPrefix, allocPrefix := objects.Pods.Prefix(""), objects.NodeAllocations.Prefix("")
	nodePrefix, nsPrefix := objects.Nodes.Prefix(""), objects.Namespaces.Prefix("")
	for ev := range w.Events() {
		if ev.Revision >= marker {
			checkVictims()
			return nil
		}
		key := ev.KV.Key
		switch {
		case ev.Type == raftstore.EventDelete && strings.HasPrefix(key, podPrefix):
			delete(pods, key)
			topo.deletePod(key)
		case ev.Type == raftstore.EventDelete && strings.HasPrefix(key, nodePrefix):
			delete(topo.nodes, strings.TrimPrefix(key, nodePrefix))
		case ev.Type == raftstore.EventDelete && strings.HasPrefix(key, nsPrefix):
			delete(topo.namespaces, strings.TrimPrefix(key, nsPrefix))
		case ev.Type != raftstore.EventPut:
		case strings.HasPrefix(key, nodePrefix):
			n := &corev1.Node{}
			if err := objects.Decode(ev.KV, n); err != nil {
				return err
			}
			topo.nodes[n.GetMetadata().GetName()] = n
		case strings.HasPrefix(key, nsPrefix):
			ns := &corev1.Namespace{}
			if err := objects.Decode(ev.KV, ns); err != nil {
				return err
			}
			topo.namespaces[ns.GetMetadata().GetName()] = ns.GetMetadata().GetLabels()
		case strings.HasPrefix(key, podPrefix):
			p := &corev1.Pod{}
			if err := objects.Decode(ev.KV, p); err != nil {
				return err
			}
			now := podState{p.GetMetadata().GetUid(), p.GetSpec().GetNodeName()}
			was, ok := pods[key]
			if nom := p.GetStatus().GetNominatedNodeName(); nom != "" && now.node == "" && rep.nominated[key] != nom {
				if prev := rep.nominated[key]; prev != "" && ok && was.uid == now.uid {
					rep.violate("pod %s nominated to %s, then to %s at revision %d (double nomination)", key, prev, nom, ev.Revision)
				}
				rep.nominated[key] = nom
				rep.Nominations++
				if nominatedAt[nom] == nil {
					nominatedAt[nom] = map[int64]bool{}
				}
				nominatedAt[nom][ev.Revision] = true
			}
			if preemptedVictim(p) && rep.victims[key] != now.uid {
				rep.victims[key] = now.uid
				rep.Victims++
				markedAt = append(markedAt, victimMark{key, now.node, ev.Revision})
			}
			switch {
			case !ok || was.uid != now.uid:
				if now.node != "" {
					rep.Binds++ // created bound
					topo.checkBind(rep, key, p, ev.Revision)
				}
			case was.node == "" && now.node != "":
				rep.Binds++
				topo.checkBind(rep, key, p, ev.Revision)
			case was.node != now.node:
				rep.violate("pod %s (uid %s) moved from node %s to %q at revision %d", key, now.uid, was.node, now.node, ev.Revision)
			}
			pods[key] = now
			topo.putPod(key, p)
		case strings.HasPrefix(key, allocPrefix):
			a := &corev1.NodeAllocation{}
			if err := objects.Decode(ev.KV, a); err != nil {
				return err
			}
			rep.AllocationWrites++
			var u framework.Resources
			var us framework.Scalars
			for _, ap := range a.GetPods() {
				u.MilliCPU, u.Memory, u.Pods = u.MilliCPU+ap.GetMilliCpu(), u.Memory+ap.GetMemoryBytes(), u.Pods+1
				us = addScalars(us, ap.GetScalarResources())
			}
			if al, ok := allocatable[a.GetMetadata().GetName()]; ok && !fits(u, al) {
				rep.violate("NodeAllocation %s at revision %d overcommits: %+v of %+v", a.GetMetadata().GetName(), ev.Revision, u, al)
			}
			if _, ok := allocatable[a.GetMetadata().GetName()]; ok {
				if over := scalarsOver(us, scalarAlloc[a.GetMetadata().GetName()]); over != "" {
					rep.violate("NodeAllocation %s at revision %d overcommits: %s", a.GetMetadata().GetName(), ev.Revision, over)
				}
			}
		}
	}
	if err := w.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("schedsim: history: %w", err)
	}
	return fmt.Errorf("schedsim: history ended before revision %d", marker)
}

// preemptedVictim reports whether a pod carries the scheduler's
// DisruptionTarget condition of a preemption and is terminating.
func preemptedVictim(p *corev1.Pod) bool {
	if p.GetMetadata().GetDeletionTimestamp() == nil {
		return false
	}
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == framework.ConditionDisruptionTarget {
			return c.GetStatus() == "True" && c.GetReason() == framework.ReasonPreemptionByScheduler
		}
	}
	return false
}

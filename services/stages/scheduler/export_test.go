package scheduler

import (
	"context"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
)

// SetPreemptHook sets the hook a preemption calls at its named points
// ("nominated": committed, victims' deletion not yet requested;
// "requested": deletion requested, preemptor not yet bound) and returns
// the function that removes it. Set it before any replica starts.
func SetPreemptHook(f func(point, replica string, pod *corev1.Pod)) (restore func()) {
	preemptHook = f
	return func() { preemptHook = nil }
}

// GuardRegistry is the guard registry as a replica knows it.
type GuardRegistry = guardRegistry

// Rev is the registry's revision as known (0: none).
func (r *GuardRegistry) Rev() int64 { return r.rev }

// GuardRegistry returns the guard registry as s knows it now.
func (s *Stage) GuardRegistry() (*GuardRegistry, error) { return s.guardRegistry() }

// Refresh reads the named record (a node's allocation, a domain record or
// the guard registry) as after a lost race, waiting for the pod informer.
func (s *Stage) Refresh(ctx context.Context, name string) error { return s.refreshNode(ctx, name) }

// BindKnowing runs one bind attempt of pod (the revision the decision
// saw) to node, decided when the pod informer had reached decidedAt,
// knowing the guard registry reg (nil: as s knows it now). It returns the
// commit's revision, the outcome ("bound", "podStale", "nodeStale",
// "nodeNotFound", "domainStale") and, on domainStale, the record to refresh.
func (s *Stage) BindKnowing(ctx context.Context, pod *corev1.Pod, node string, decidedAt int64, reg *GuardRegistry) (int64, string, string, error) {
	return s.bindAttempt(ctx, bindRequest{pod: pod, node: node, decidedAt: decidedAt}, reg)
}

// Decision is a scheduling cycle a test ran with Decide.
type Decision struct {
	Node         string // the node chosen
	FirstOfGroup bool   // Result.FirstOfGroup: the bind compares the anchors
	pod          *corev1.Pod
	seen         []*framework.PodMeta
	view         nodeView
	decidedAt    int64
}

// Decide runs one scheduling cycle of pod (as stored) on s's cache, as a
// handling does, and forgets the pod's assumption at once: BindDecision
// binds it.
func (s *Stage) Decide(pod *corev1.Pod) (*Decision, error) {
	at := s.podRev.current()
	res, seen, view, err := s.decide(pod)
	if err != nil {
		return nil, err
	}
	_ = s.cache.ForgetPod(pod)
	return &Decision{Node: res.Node, FirstOfGroup: res.FirstOfGroup, pod: pod, seen: seen, view: view, decidedAt: at}, nil
}

// BindDecision runs one bind attempt of d's pod to node: d.Node, or a
// node without pods, as though d had chosen it. It returns what
// BindKnowing returns.
func (s *Stage) BindDecision(ctx context.Context, d *Decision, node string) (int64, string, string, error) {
	seen, view := d.seen, d.view
	if node != d.Node {
		seen, view = nil, nodeView{}
	}
	return s.bindAttempt(ctx, bindRequest{pod: d.pod, node: node, seen: seen, view: view, decidedAt: d.decidedAt, firstOfGroup: d.FirstOfGroup}, nil)
}

// AffinityAnchors returns the names of pod's first-pod anchor records.
func AffinityAnchors(pod *corev1.Pod) []string { return affinityAnchors(pod) }

// bindAttempt is bind, knowing reg (nil: as s knows it now), with the
// outcome named.
func (s *Stage) bindAttempt(ctx context.Context, req bindRequest, reg *GuardRegistry) (int64, string, string, error) {
	n, ok := s.nodes.Get("", req.node)
	if !ok {
		return 0, "nodeNotFound", "", nil
	}
	unlock := s.bindLocks.lock(req.node)
	defer unlock()
	if reg == nil {
		var err error
		if reg, err = s.guardRegistry(); err != nil {
			return 0, "", "", err
		}
	}
	var stale string
	req.stale = &stale
	rev, outcome, err := s.bindKnowing(ctx, req, n, reg)
	return rev, [...]string{bound: "bound", podStale: "podStale", nodeStale: "nodeStale", nodeNotFound: "nodeNotFound", domainStale: "domainStale"}[outcome], stale, err
}

package scheduler

import (
	"context"

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
	n, ok := s.nodes.Get("", node)
	if !ok {
		return 0, "nodeNotFound", "", nil
	}
	unlock := s.bindLocks.lock(node)
	defer unlock()
	if reg == nil {
		var err error
		if reg, err = s.guardRegistry(); err != nil {
			return 0, "", "", err
		}
	}
	var stale string
	rev, outcome, err := s.bindKnowing(ctx, bindRequest{pod: pod, node: node, decidedAt: decidedAt, stale: &stale}, n, reg)
	return rev, [...]string{bound: "bound", podStale: "podStale", nodeStale: "nodeStale", nodeNotFound: "nodeNotFound", domainStale: "domainStale"}[outcome], stale, err
}

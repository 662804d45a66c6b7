package scheduler

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/interpodaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodeaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"
)

// The pod-aware plugins' matching rules, one term or constraint at a time
// over stored objects, for checkers outside the package: schedsim.Verify
// re-evaluates every binding of a store's history with them, counting
// pods and domains itself, independently of the plugins' per-cycle
// state.

// AffinityTermSelector returns the matcher of owner's pod (anti-)affinity
// term t, as InterPodAffinity matches it: a pod is selected when its
// namespace is one of the term's namespaces (the owner's when it names
// none and has no namespaceSelector) or its namespace's labels (nsLabels)
// match the namespaceSelector, and the LabelSelector, with matchLabelKeys
// and mismatchLabelKeys resolved on the owner's labels, matches its
// labels.
func AffinityTermSelector(owner *corev1.Pod, t *corev1.PodAffinityTerm) func(p *corev1.Pod, nsLabels map[string]string) bool {
	term := framework.NewAffinityTerm(owner, t)
	return func(p *corev1.Pod, nsLabels map[string]string) bool {
		meta := interpodaffinity.IncomingMeta(p)
		snap := &framework.Snapshot{Namespaces: map[string]map[string]string{meta.Namespace: nsLabels}}
		return term.Matches(&meta, snap)
	}
}

// SpreadSelector returns the matcher of owner's topology spread
// constraint c, as PodTopologySpread counts pods: in owner's namespace,
// not terminating, with labels the LabelSelector (plus matchLabelKeys
// resolved on the owner's labels) matches. The owner counts itself by the
// same rule.
func SpreadSelector(owner *corev1.Pod, c *corev1.TopologySpreadConstraint) func(p *corev1.Pod) bool {
	ns := owner.GetMetadata().GetNamespace()
	sel := framework.NewLabelSelector(c.GetLabelSelector(), owner.GetMetadata().GetLabels(), c.GetMatchLabelKeys(), nil)
	return func(p *corev1.Pod) bool {
		md := p.GetMetadata()
		return md.GetNamespace() == ns && md.GetDeletionTimestamp() == nil && sel.Matches(md.GetLabels())
	}
}

// SpreadNodeFilter returns constraint c's node inclusion policies for
// owner: nodeAffinityPolicy Honor (the default) requires owner's
// nodeSelector and required node affinity to match the node,
// nodeTaintsPolicy Honor requires owner to tolerate its NoSchedule and
// NoExecute taints (readiness included, as the node lifecycle
// controller's taint). A node the scheduler's cache would refuse
// (invalid allocatable) is left out.
func SpreadNodeFilter(owner *corev1.Pod, c *corev1.TopologySpreadConstraint) func(node *corev1.Node) bool {
	sc := podtopologyspread.Constraint{HonorAffinity: c.GetNodeAffinityPolicy() != "Ignore", HonorTaints: c.GetNodeTaintsPolicy() == "Honor"}
	na, tols := nodeaffinity.NewFilterState(owner), owner.GetSpec().GetTolerations()
	if (!sc.HonorAffinity || na == nil) && !sc.HonorTaints {
		return func(*corev1.Node) bool { return true }
	}
	return func(node *corev1.Node) bool {
		n := &framework.NodeInfo{}
		return n.SetNode(node) == nil && sc.Includes(n, na, tols)
	}
}

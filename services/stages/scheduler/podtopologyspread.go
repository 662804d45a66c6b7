package scheduler

import (
	"maps"
	"math"

	"github.com/podflow/podflow/proto/corev1"
)

// PodTopologySpreadName is the PodTopologySpread plugin's name.
const PodTopologySpreadName = "PodTopologySpread"

// PodTopologySpread's reasons, kube-scheduler's words.
const (
	ReasonTopologySpread             = "node(s) didn't match pod topology spread constraints"
	ReasonTopologySpreadMissingLabel = "node(s) didn't match pod topology spread constraints (missing required label)"
)

// LabelHostname is the well-known per-node topology key.
const LabelHostname = "kubernetes.io/hostname"

// podTopologySpread is kube-scheduler's PodTopologySpread: its filter
// enforces the pod's DoNotSchedule constraints (a node's domain may hold
// at most maxSkew more matching pods, the pod included, than the least
// loaded eligible domain — 0 when fewer than minDomains domains exist);
// its score prefers, for the ScheduleAnyway constraints, the domains with
// fewer matching pods. Eligible domains come from the nodes that have
// every constraint's topology key and pass the constraint's
// nodeAffinityPolicy (Honor by default: the pod's node selector and
// required node affinity) and nodeTaintsPolicy (Ignore by default; Honor:
// the pod tolerates the node's NoSchedule and NoExecute taints). Matching
// pods are the pods in the pod's namespace, not terminating, that the
// labelSelector (plus matchLabelKeys) selects.
//
// A pod without constraints of its own is scored by kube-scheduler's
// system default constraints (systemDefaultConstraints: maxSkew 3 on
// kubernetes.io/hostname, 5 on topology.kubernetes.io/zone, both
// ScheduleAnyway) over the pods that the Services selecting it select
// (their selectors merged, kube-scheduler's DefaultSelector; podflow
// serves no ReplicaSets, StatefulSets or ReplicationControllers); with no
// such Service it is not spread. Under the defaults a node without a zone
// label is still scored by hostname (kube-scheduler's
// requireAllTopologies is false for system defaults).
//
// PreFilter counts the matching pods per domain once per cycle from the
// snapshot's pods; a pod without DoNotSchedule constraints skips the
// filter, one without ScheduleAnyway constraints (own or default) the
// score.
type podTopologySpread struct{}

// LabelTopologyZone is the well-known zone topology key.
const LabelTopologyZone = "topology.kubernetes.io/zone"

// systemDefaultConstraints are kube-scheduler's cluster-level default
// spread constraints (PodTopologySpreadArgs defaultingType System).
var systemDefaultConstraints = []struct {
	key     string
	maxSkew int64
}{{LabelHostname, 3}, {LabelTopologyZone, 5}}

var (
	_ PreFilterPlugin = podTopologySpread{}
	_ FilterPlugin    = podTopologySpread{}
	_ BatchFilter     = podTopologySpread{}
	_ PreScorePlugin  = podTopologySpread{}
	_ ScorePlugin     = podTopologySpread{}
	_ BatchScorer     = podTopologySpread{}
)

var (
	spreadFilterKey           = NewStateKey("PreFilter" + PodTopologySpreadName)
	spreadScoreKey            = NewStateKey("PreScore" + PodTopologySpreadName)
	statusSpread              = NewStatus(Unschedulable, ReasonTopologySpread)
	statusSpreadMissingLabels = NewStatus(UnschedulableAndUnresolvable, ReasonTopologySpreadMissingLabel)
)

// spreadConstraint is a parsed TopologySpreadConstraint.
type spreadConstraint struct {
	maxSkew       int64
	minDomains    int
	key           string
	selector      labelSelector
	selfMatch     int64 // 1 when the pod itself matches the selector
	honorAffinity bool  // nodeAffinityPolicy Honor
	honorTaints   bool  // nodeTaintsPolicy Honor
}

// spreadState is one cycle's view of the constraints of one kind
// (DoNotSchedule for the filter, ScheduleAnyway for the score).
type spreadState struct {
	constraints []spreadConstraint
	// requireAll: a node without every topology key is left out (false
	// only for the system default constraints: such a node is scored by
	// the keys it has).
	requireAll bool
	counts     []map[string]int64 // per constraint: domain -> matching pods
	minMatch   []int64            // filter: per constraint, the global minimum
	weights    []float64          // score: per constraint, log(domains+2)
}

func (podTopologySpread) Name() string { return PodTopologySpreadName }

// spreadConstraints parses the pod's constraints with whenUnsatisfiable
// action; nil when it has none.
func spreadConstraints(pod *corev1.Pod, action string) []spreadConstraint {
	var out []spreadConstraint
	for _, c := range pod.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() != action {
			continue
		}
		sc := spreadConstraint{
			maxSkew:       int64(c.GetMaxSkew()),
			minDomains:    int(c.GetMinDomains()),
			key:           c.GetTopologyKey(),
			selector:      newLabelSelector(c.GetLabelSelector(), pod.GetMetadata().GetLabels(), c.GetMatchLabelKeys(), nil),
			honorAffinity: c.GetNodeAffinityPolicy() != "Ignore",
			honorTaints:   c.GetNodeTaintsPolicy() == "Honor",
		}
		if sc.selector.matches(pod.GetMetadata().GetLabels()) {
			sc.selfMatch = 1
		}
		out = append(out, sc)
	}
	return out
}

// defaultSpreadConstraints returns the system default constraints for a
// pod without constraints of its own, selecting what the Services of
// the pod's namespace that select it select (kube-scheduler's
// buildDefaultConstraints over DefaultSelector); nil when no Service
// selects it.
func defaultSpreadConstraints(pod *corev1.Pod, snap *Snapshot) []spreadConstraint {
	own := pod.GetMetadata().GetLabels()
	var merged map[string]string
	for _, sel := range snap.services[pod.GetMetadata().GetNamespace()] {
		if !selectsAll(sel, own) {
			continue
		}
		if merged == nil {
			merged = map[string]string{}
		}
		maps.Copy(merged, sel) // Services selecting one pod cannot conflict
	}
	if len(merged) == 0 {
		return nil
	}
	selector := newLabelSelector(&corev1.LabelSelector{MatchLabels: merged}, nil, nil, nil)
	out := make([]spreadConstraint, len(systemDefaultConstraints))
	for i, d := range systemDefaultConstraints {
		out[i] = spreadConstraint{maxSkew: d.maxSkew, minDomains: 1, key: d.key, selector: selector, selfMatch: 1, honorAffinity: true}
	}
	return out
}

// selectsAll reports whether labels has every key and value of sel.
func selectsAll(sel, labels map[string]string) bool {
	for k, v := range sel {
		if w, ok := labels[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// hasTopologyKeys reports whether n has every constraint's topology key.
func hasTopologyKeys(n *NodeInfo, cs []spreadConstraint) bool {
	for i := range cs {
		if _, ok := n.labels[cs[i].key]; !ok {
			return false
		}
	}
	return true
}

// includes applies the constraint's node inclusion policies to n.
func (c *spreadConstraint) includes(n *NodeInfo, na *nodeAffinityFilterState, tols []*corev1.Toleration) bool {
	if c.honorAffinity && na != nil && !na.matches(n) {
		return false
	}
	return !c.honorTaints || taintsTolerated(tols, n) == nil
}

// countMatching counts n's pods in namespace ns, not terminating, that
// sel selects.
func countMatching(n *NodeInfo, sel *labelSelector, ns string) int64 {
	var cnt int64
	for _, p := range n.pods {
		if p.namespace == ns && !p.terminating && sel.matches(p.labels) {
			cnt++
		}
	}
	return cnt
}

// count adds the matching pods of every node of the snapshot that has all
// topology keys and passes each constraint's inclusion policies to the
// constraint's domain. With only set, it counts only domains already in
// counts (the score's, taken from the feasible nodes).
func (s *spreadState) count(pod *corev1.Pod, snap *Snapshot, only bool) {
	na := newNodeAffinityFilterState(pod)
	tols, ns := pod.GetSpec().GetTolerations(), pod.GetMetadata().GetNamespace()
	for _, n := range snap.nodes {
		if s.requireAll && !hasTopologyKeys(n, s.constraints) {
			continue
		}
		for i := range s.constraints {
			c := &s.constraints[i]
			if only && c.key == LabelHostname {
				continue // the score counts a node's own pods
			}
			if !c.includes(n, na, tols) {
				continue
			}
			v := n.labels[c.key]
			if _, ok := s.counts[i][v]; !ok && only {
				continue
			}
			s.counts[i][v] += countMatching(n, &c.selector, ns)
		}
	}
}

func (podTopologySpread) PreFilter(state *CycleState, pod *corev1.Pod) *Status {
	if len(pod.GetSpec().GetTopologySpreadConstraints()) == 0 || state.Snapshot() == nil {
		return skipStatus
	}
	cs := spreadConstraints(pod, "DoNotSchedule")
	if len(cs) == 0 {
		return skipStatus
	}
	s := &spreadState{constraints: cs, requireAll: true, counts: make([]map[string]int64, len(cs)), minMatch: make([]int64, len(cs))}
	for i := range s.counts {
		s.counts[i] = map[string]int64{}
	}
	s.count(pod, state.Snapshot(), false)
	for i, c := range cs {
		m := int64(math.MaxInt32) // no eligible domain: no node is skewed
		for _, n := range s.counts[i] {
			m = min(m, n)
		}
		if len(s.counts[i]) < c.minDomains {
			m = 0
		}
		s.minMatch[i] = m
	}
	state.Write(spreadFilterKey, s)
	return nil
}

func (podTopologySpread) Filter(state *CycleState, _ *corev1.Pod, n *NodeInfo) *Status {
	s, _ := state.Read(spreadFilterKey).(*spreadState)
	return s.filter(n)
}

func (podTopologySpread) FilterNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, statuses []*Status) {
	s, _ := state.Read(spreadFilterKey).(*spreadState)
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i] = s.filter(n)
		}
	}
}

// filter is the skew check: matching pods in n's domain, plus the pod
// itself if it matches, minus the global minimum, at most maxSkew.
func (s *spreadState) filter(n *NodeInfo) *Status {
	if s == nil {
		return nil
	}
	for i := range s.constraints {
		c := &s.constraints[i]
		v, ok := n.labels[c.key]
		if !ok {
			return statusSpreadMissingLabels
		}
		if s.counts[i][v]+c.selfMatch-s.minMatch[i] > c.maxSkew {
			return statusSpread
		}
	}
	return nil
}

func (podTopologySpread) PreScore(state *CycleState, pod *corev1.Pod, feasible []*NodeInfo) *Status {
	snap := state.Snapshot()
	if snap == nil {
		return skipStatus
	}
	var cs []spreadConstraint
	own := len(pod.GetSpec().GetTopologySpreadConstraints()) > 0
	switch {
	case own:
		cs = spreadConstraints(pod, "ScheduleAnyway")
	case len(snap.services[pod.GetMetadata().GetNamespace()]) > 0:
		cs = defaultSpreadConstraints(pod, snap)
	}
	if len(cs) == 0 {
		return skipStatus
	}
	s := &spreadState{constraints: cs, requireAll: own, counts: make([]map[string]int64, len(cs)), weights: make([]float64, len(cs))}
	for i := range s.counts {
		s.counts[i] = map[string]int64{}
	}
	counted := 0 // feasible nodes scored (with every topology key, when required)
	for _, n := range feasible {
		if own && !hasTopologyKeys(n, cs) {
			continue
		}
		counted++
		for i := range cs {
			if cs[i].key != LabelHostname {
				s.counts[i][n.labels[cs[i].key]] = 0
			}
		}
	}
	for i := range cs {
		domains := len(s.counts[i])
		if cs[i].key == LabelHostname {
			domains = counted
		}
		s.weights[i] = math.Log(float64(domains + 2))
	}
	s.count(pod, snap, true)
	state.Write(spreadScoreKey, s)
	return nil
}

// ignoredNode is the raw score of a node without every topology key: it
// scores 0 after normalization.
const ignoredNode = -1

func (podTopologySpread) Score(state *CycleState, pod *corev1.Pod, n *NodeInfo) int64 {
	s, _ := state.Read(spreadScoreKey).(*spreadState)
	return s.score(n, pod.GetMetadata().GetNamespace())
}

func (podTopologySpread) ScoreNodes(state *CycleState, pod *corev1.Pod, nodes []*NodeInfo, scores []int64) {
	s, _ := state.Read(spreadScoreKey).(*spreadState)
	ns := pod.GetMetadata().GetNamespace()
	for i, n := range nodes {
		scores[i] = s.score(n, ns)
	}
}

// score sums, per constraint, the matching pods of n's domain weighted by
// the constraint's normalizing weight, plus maxSkew-1 (kube-scheduler's
// scoreForCount).
func (s *spreadState) score(n *NodeInfo, ns string) int64 {
	if s == nil {
		return 0
	}
	if s.requireAll && !hasTopologyKeys(n, s.constraints) {
		return ignoredNode
	}
	var score float64
	for i := range s.constraints {
		c := &s.constraints[i]
		v, ok := n.labels[c.key]
		if !ok {
			continue // only under the system defaults
		}
		var cnt int64
		if c.key == LabelHostname {
			cnt = countMatching(n, &c.selector, ns)
		} else {
			cnt = s.counts[i][v]
		}
		score += float64(cnt)*s.weights[i] + float64(c.maxSkew-1)
	}
	return int64(math.Round(score))
}

func (pl podTopologySpread) ScoreExtensions() ScoreExtensions { return pl }

// NormalizeScore reverses the scores onto 0–100 (fewest matching pods
// best); an ignored node scores 0.
func (podTopologySpread) NormalizeScore(_ *CycleState, _ *corev1.Pod, scores []int64) *Status {
	minScore, maxScore := int64(math.MaxInt64), int64(0)
	for _, s := range scores {
		if s != ignoredNode {
			minScore, maxScore = min(minScore, s), max(maxScore, s)
		}
	}
	for i, s := range scores {
		switch {
		case s == ignoredNode:
			scores[i] = 0
		case maxScore == 0:
			scores[i] = MaxNodeScore
		default:
			scores[i] = MaxNodeScore * (maxScore + minScore - s) / maxScore
		}
	}
	return nil
}

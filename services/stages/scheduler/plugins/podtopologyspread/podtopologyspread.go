package podtopologyspread

import (
	"maps"
	"math"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodeaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/tainttoleration"

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

// PodTopologySpread is kube-scheduler's PodTopologySpread: its filter
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
// LabelSelector (plus matchLabelKeys) selects.
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
type PodTopologySpread struct{}

// LabelTopologyZone is the well-known zone topology key.
const LabelTopologyZone = "topology.kubernetes.io/zone"

// systemDefaultConstraints are kube-scheduler's cluster-level default
// spread constraints (PodTopologySpreadArgs defaultingType System).
var systemDefaultConstraints = []struct {
	key     string
	maxSkew int64
}{{LabelHostname, 3}, {LabelTopologyZone, 5}}

var (
	_ framework.PreFilterPlugin = PodTopologySpread{}
	_ framework.FilterPlugin    = PodTopologySpread{}
	_ framework.BatchFilter     = PodTopologySpread{}
	_ framework.PreScorePlugin  = PodTopologySpread{}
	_ framework.ScorePlugin     = PodTopologySpread{}
	_ framework.BatchScorer     = PodTopologySpread{}
)

var (
	spreadFilterKey           = framework.NewStateKey("PreFilter" + PodTopologySpreadName)
	ScoreKey                  = framework.NewStateKey("PreScore" + PodTopologySpreadName)
	statusSpread              = framework.NewStatus(framework.Unschedulable, ReasonTopologySpread)
	statusSpreadMissingLabels = framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonTopologySpreadMissingLabel)
)

// Constraint is a parsed TopologySpreadConstraint.
type Constraint struct {
	MaxSkew       int64
	minDomains    int
	Key           string
	Selector      framework.LabelSelector
	selfMatch     int64 // 1 when the pod itself matches the selector
	HonorAffinity bool  // nodeAffinityPolicy Honor
	HonorTaints   bool  // nodeTaintsPolicy Honor
}

// State is one cycle's view of the constraints of one kind
// (DoNotSchedule for the filter, ScheduleAnyway for the score).
type State struct {
	Constraints []Constraint
	// requireAll: a node without every topology key is left out (false
	// only for the system default constraints: such a node is scored by
	// the keys it has).
	requireAll bool
	Counts     []map[string]int64 // per constraint: domain -> matching pods
	minMatch   []int64            // filter: per constraint, the global minimum
	Weights    []float64          // score: per constraint, log(domains+2)
}

func (PodTopologySpread) Name() string { return PodTopologySpreadName }

// spreadConstraints parses the pod's constraints with whenUnsatisfiable
// action; nil when it has none.
func spreadConstraints(pod *corev1.Pod, action string) []Constraint {
	var out []Constraint
	for _, c := range pod.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() != action {
			continue
		}
		sc := Constraint{
			MaxSkew:       int64(c.GetMaxSkew()),
			minDomains:    int(c.GetMinDomains()),
			Key:           c.GetTopologyKey(),
			Selector:      framework.NewLabelSelector(c.GetLabelSelector(), pod.GetMetadata().GetLabels(), c.GetMatchLabelKeys(), nil),
			HonorAffinity: c.GetNodeAffinityPolicy() != "Ignore",
			HonorTaints:   c.GetNodeTaintsPolicy() == "Honor",
		}
		if sc.Selector.Matches(pod.GetMetadata().GetLabels()) {
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
func defaultSpreadConstraints(pod *corev1.Pod, snap *framework.Snapshot) []Constraint {
	own := pod.GetMetadata().GetLabels()
	var merged map[string]string
	for _, sel := range snap.Services[pod.GetMetadata().GetNamespace()] {
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
	selector := framework.NewLabelSelector(&corev1.LabelSelector{MatchLabels: merged}, nil, nil, nil)
	out := make([]Constraint, len(systemDefaultConstraints))
	for i, d := range systemDefaultConstraints {
		out[i] = Constraint{MaxSkew: d.maxSkew, minDomains: 1, Key: d.key, Selector: selector, selfMatch: 1, HonorAffinity: true}
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
func hasTopologyKeys(n *framework.NodeInfo, cs []Constraint) bool {
	for i := range cs {
		if _, ok := n.Labels()[cs[i].Key]; !ok {
			return false
		}
	}
	return true
}

// includes applies the constraint's node inclusion policies to n.
func (c *Constraint) Includes(n *framework.NodeInfo, na *nodeaffinity.FilterState, tols []*corev1.Toleration) bool {
	if c.HonorAffinity && na != nil && !na.Matches(n) {
		return false
	}
	return !c.HonorTaints || tainttoleration.TaintsTolerated(tols, n) == nil
}

// CountMatching counts n's pods in namespace ns, not terminating, that
// sel selects.
func CountMatching(n *framework.NodeInfo, sel *framework.LabelSelector, ns string) int64 {
	var cnt int64
	for _, p := range n.Pods() {
		if p.Namespace == ns && !p.Terminating && sel.Matches(p.Labels) {
			cnt++
		}
	}
	return cnt
}

// count adds the matching pods of every node of the snapshot that has all
// topology keys and passes each constraint's inclusion policies to the
// constraint's domain. With only set, it counts only domains already in
// counts (the score's, taken from the feasible nodes).
func (s *State) count(pod *corev1.Pod, snap *framework.Snapshot, only bool) {
	na := nodeaffinity.NewFilterState(pod)
	tols, ns := pod.GetSpec().GetTolerations(), pod.GetMetadata().GetNamespace()
	for _, n := range snap.NodeList {
		if s.requireAll && !hasTopologyKeys(n, s.Constraints) {
			continue
		}
		for i := range s.Constraints {
			c := &s.Constraints[i]
			if only && c.Key == LabelHostname {
				continue // the score counts a node's own pods
			}
			if !c.Includes(n, na, tols) {
				continue
			}
			v := n.Labels()[c.Key]
			if _, ok := s.Counts[i][v]; !ok && only {
				continue
			}
			s.Counts[i][v] += CountMatching(n, &c.Selector, ns)
		}
	}
}

func (PodTopologySpread) PreFilter(state *framework.CycleState, pod *corev1.Pod) *framework.Status {
	if len(pod.GetSpec().GetTopologySpreadConstraints()) == 0 || state.Snapshot() == nil {
		return framework.SkipStatus()
	}
	cs := spreadConstraints(pod, "DoNotSchedule")
	if len(cs) == 0 {
		return framework.SkipStatus()
	}
	s := &State{Constraints: cs, requireAll: true, Counts: make([]map[string]int64, len(cs)), minMatch: make([]int64, len(cs))}
	for i := range s.Counts {
		s.Counts[i] = map[string]int64{}
	}
	s.count(pod, state.Snapshot(), false)
	for i, c := range cs {
		m := int64(math.MaxInt32) // no eligible domain: no node is skewed
		for _, n := range s.Counts[i] {
			m = min(m, n)
		}
		if len(s.Counts[i]) < c.minDomains {
			m = 0
		}
		s.minMatch[i] = m
	}
	state.Write(spreadFilterKey, s)
	return nil
}

func (PodTopologySpread) Filter(state *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	s, _ := state.Read(spreadFilterKey).(*State)
	return s.filter(n)
}

func (PodTopologySpread) FilterNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, statuses []*framework.Status) {
	s, _ := state.Read(spreadFilterKey).(*State)
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i] = s.filter(n)
		}
	}
}

// filter is the skew check: matching pods in n's domain, plus the pod
// itself if it matches, minus the global minimum, at most maxSkew.
func (s *State) filter(n *framework.NodeInfo) *framework.Status {
	if s == nil {
		return nil
	}
	for i := range s.Constraints {
		c := &s.Constraints[i]
		v, ok := n.Labels()[c.Key]
		if !ok {
			return statusSpreadMissingLabels
		}
		if s.Counts[i][v]+c.selfMatch-s.minMatch[i] > c.MaxSkew {
			return statusSpread
		}
	}
	return nil
}

func (PodTopologySpread) PreScore(state *framework.CycleState, pod *corev1.Pod, feasible []*framework.NodeInfo) *framework.Status {
	snap := state.Snapshot()
	if snap == nil {
		return framework.SkipStatus()
	}
	var cs []Constraint
	own := len(pod.GetSpec().GetTopologySpreadConstraints()) > 0
	switch {
	case own:
		cs = spreadConstraints(pod, "ScheduleAnyway")
	case len(snap.Services[pod.GetMetadata().GetNamespace()]) > 0:
		cs = defaultSpreadConstraints(pod, snap)
	}
	if len(cs) == 0 {
		return framework.SkipStatus()
	}
	s := &State{Constraints: cs, requireAll: own, Counts: make([]map[string]int64, len(cs)), Weights: make([]float64, len(cs))}
	for i := range s.Counts {
		s.Counts[i] = map[string]int64{}
	}
	counted := 0 // feasible nodes scored (with every topology key, when required)
	for _, n := range feasible {
		if own && !hasTopologyKeys(n, cs) {
			continue
		}
		counted++
		for i := range cs {
			if cs[i].Key != LabelHostname {
				s.Counts[i][n.Labels()[cs[i].Key]] = 0
			}
		}
	}
	for i := range cs {
		domains := len(s.Counts[i])
		if cs[i].Key == LabelHostname {
			domains = counted
		}
		s.Weights[i] = math.Log(float64(domains + 2))
	}
	s.count(pod, snap, true)
	state.Write(ScoreKey, s)
	return nil
}

// ignoredNode is the raw score of a node without every topology key: it
// scores 0 after normalization.
const ignoredNode = -1

func (PodTopologySpread) Score(state *framework.CycleState, pod *corev1.Pod, n *framework.NodeInfo) int64 {
	s, _ := state.Read(ScoreKey).(*State)
	return s.score(n, pod.GetMetadata().GetNamespace())
}

func (PodTopologySpread) ScoreNodes(state *framework.CycleState, pod *corev1.Pod, nodes []*framework.NodeInfo, scores []int64) {
	s, _ := state.Read(ScoreKey).(*State)
	ns := pod.GetMetadata().GetNamespace()
	for i, n := range nodes {
		scores[i] = s.score(n, ns)
	}
}

// score sums, per constraint, the matching pods of n's domain weighted by
// the constraint's normalizing weight, plus maxSkew-1 (kube-scheduler's
// scoreForCount).
func (s *State) score(n *framework.NodeInfo, ns string) int64 {
	if s == nil {
		return 0
	}
	if s.requireAll && !hasTopologyKeys(n, s.Constraints) {
		return ignoredNode
	}
	var score float64
	for i := range s.Constraints {
		c := &s.Constraints[i]
		v, ok := n.Labels()[c.Key]
		if !ok {
			continue // only under the system defaults
		}
		var cnt int64
		if c.Key == LabelHostname {
			cnt = CountMatching(n, &c.Selector, ns)
		} else {
			cnt = s.Counts[i][v]
		}
		score += float64(cnt)*s.Weights[i] + float64(c.MaxSkew-1)
	}
	return int64(math.Round(score))
}

func (pl PodTopologySpread) ScoreExtensions() framework.ScoreExtensions { return pl }

// NormalizeScore reverses the scores onto 0–100 (fewest matching pods
// best); an ignored node scores 0.
func (PodTopologySpread) NormalizeScore(_ *framework.CycleState, _ *corev1.Pod, scores []int64) *framework.Status {
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
			scores[i] = framework.MaxNodeScore
		default:
			scores[i] = framework.MaxNodeScore * (maxScore + minScore - s) / maxScore
		}
	}
	return nil
}

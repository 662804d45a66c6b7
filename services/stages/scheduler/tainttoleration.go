package scheduler

import "github.com/podflow/podflow/proto/corev1"

// TaintTolerationName is the TaintToleration plugin's name.
const TaintTolerationName = "TaintToleration"

// taintToleration is kube-scheduler's TaintToleration: its filter rejects
// a node with a NoSchedule or NoExecute taint the pod does not tolerate
// (the first such taint is the reason; a node whose Ready condition is not
// True carries the not-ready or unreachable taint, see NodeInfo); its
// score prefers nodes with fewer untolerated PreferNoSchedule taints
// (counted, then normalized and reversed across the feasible nodes).
type taintToleration struct{}

var (
	_ FilterPlugin   = taintToleration{}
	_ BatchFilter    = taintToleration{}
	_ PreScorePlugin = taintToleration{}
	_ ScorePlugin    = taintToleration{}
	_ BatchScorer    = taintToleration{}
)

var taintTolerationKey = NewStateKey("PreScore" + TaintTolerationName)

// taintScoreState is the pod's tolerations that can tolerate a
// PreferNoSchedule taint (effect "" or PreferNoSchedule).
type taintScoreState struct{ tolerations []*corev1.Toleration }

func (taintToleration) Name() string { return TaintTolerationName }

func (taintToleration) Filter(_ *CycleState, pod *corev1.Pod, n *NodeInfo) *Status {
	return taintsTolerated(pod.GetSpec().GetTolerations(), n)
}

func (taintToleration) FilterNodes(_ *CycleState, pod *corev1.Pod, nodes []*NodeInfo, statuses []*Status) {
	tols := pod.GetSpec().GetTolerations()
	for i, n := range nodes {
		if statuses[i] == nil && len(n.taints) != 0 {
			statuses[i] = taintsTolerated(tols, n)
		}
	}
}

// taintsTolerated is TaintToleration's verdict on n: the status of the
// node's first NoSchedule or NoExecute taint tols do not tolerate, or nil.
func taintsTolerated(tols []*corev1.Toleration, n *NodeInfo) *Status {
	for i := range n.taints {
		t := &n.taints[i]
		if (t.effect == EffectNoSchedule || t.effect == EffectNoExecute) && !tolerates(tols, t) {
			return t.status
		}
	}
	return nil
}

// PreScore keeps the tolerations that can tolerate a PreferNoSchedule
// taint; with none (most pods) it writes no state, which Score reads as
// no tolerations.
func (taintToleration) PreScore(state *CycleState, pod *corev1.Pod, _ []*NodeInfo) *Status {
	var tols []*corev1.Toleration
	for _, t := range pod.GetSpec().GetTolerations() {
		if e := t.GetEffect(); e == "" || e == EffectPreferNoSchedule {
			tols = append(tols, t)
		}
	}
	if len(tols) != 0 {
		state.Write(taintTolerationKey, &taintScoreState{tolerations: tols})
	}
	return nil
}

// Score is the number of the node's PreferNoSchedule taints the pod does
// not tolerate.
func (taintToleration) Score(state *CycleState, _ *corev1.Pod, n *NodeInfo) int64 {
	s, _ := state.Read(taintTolerationKey).(*taintScoreState)
	return s.score(n)
}

func (taintToleration) ScoreNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, scores []int64) {
	s, _ := state.Read(taintTolerationKey).(*taintScoreState)
	for i, n := range nodes {
		if n.preferTaints == 0 { // most nodes: no call
			scores[i] = 0
			continue
		}
		scores[i] = s.score(n)
	}
}

func (s *taintScoreState) score(n *NodeInfo) int64 {
	if n.preferTaints == 0 {
		return 0
	}
	var tols []*corev1.Toleration
	if s != nil {
		tols = s.tolerations
	}
	var count int64
	for i := range n.taints {
		t := &n.taints[i]
		if t.effect == EffectPreferNoSchedule && !tolerates(tols, t) {
			count++
		}
	}
	return count
}

func (pl taintToleration) ScoreExtensions() ScoreExtensions { return pl }

// NormalizeScore reverses: the node with the most untolerated taints
// scores 0, every node 100 when none has any.
func (taintToleration) NormalizeScore(_ *CycleState, _ *corev1.Pod, scores []int64) *Status {
	DefaultNormalizeScore(MaxNodeScore, true, scores)
	return nil
}

// tolerates reports whether any toleration tolerates the taint.
func tolerates(tols []*corev1.Toleration, t *taint) bool {
	for _, tol := range tols {
		if toleratesTaint(tol, t) {
			return true
		}
	}
	return false
}

// toleratesTaint is Kubernetes' Toleration.ToleratesTaint: an empty effect
// matches every effect, an empty key (with Exists) every key, and an empty
// operator means Equal.
func toleratesTaint(tol *corev1.Toleration, t *taint) bool {
	if e := tol.GetEffect(); e != "" && e != t.effect {
		return false
	}
	if k := tol.GetKey(); k != "" && k != t.key {
		return false
	}
	switch tol.GetOperator() {
	case "", OpEqual:
		return tol.GetValue() == t.value
	case OpExists:
		return true
	default:
		return false
	}
}

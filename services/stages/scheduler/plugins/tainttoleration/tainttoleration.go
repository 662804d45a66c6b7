package tainttoleration

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// TaintTolerationName is the TaintToleration plugin's name.
const TaintTolerationName = "TaintToleration"

// TaintToleration is kube-scheduler's TaintToleration: its filter rejects
// a node with a NoSchedule or NoExecute taint the pod does not tolerate
// (the first such taint is the reason; a node whose Ready condition is not
// True carries the not-ready or unreachable taint, see NodeInfo); its
// score prefers nodes with fewer untolerated PreferNoSchedule taints
// (counted, then normalized and reversed across the feasible nodes).
type TaintToleration struct{}

var (
	_ framework.FilterPlugin   = TaintToleration{}
	_ framework.BatchFilter    = TaintToleration{}
	_ framework.PreScorePlugin = TaintToleration{}
	_ framework.ScorePlugin    = TaintToleration{}
	_ framework.BatchScorer    = TaintToleration{}
)

var taintTolerationKey = framework.NewStateKey("PreScore" + TaintTolerationName)

// taintScoreState is the pod's tolerations that can tolerate a
// PreferNoSchedule taint (effect "" or PreferNoSchedule).
type taintScoreState struct{ tolerations []*corev1.Toleration }

func (TaintToleration) Name() string { return TaintTolerationName }

func (TaintToleration) Filter(_ *framework.CycleState, pod *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	return TaintsTolerated(pod.GetSpec().GetTolerations(), n)
}

func (TaintToleration) FilterNodes(_ *framework.CycleState, pod *corev1.Pod, nodes []*framework.NodeInfo, statuses []*framework.Status) {
	tols := pod.GetSpec().GetTolerations()
	for i, n := range nodes {
		if statuses[i] == nil && len(n.Taints()) != 0 {
			statuses[i] = TaintsTolerated(tols, n)
		}
	}
}

// TaintsTolerated is TaintToleration's verdict on n: the status of the
// node's first NoSchedule or NoExecute taint tols do not tolerate, or nil.
func TaintsTolerated(tols []*corev1.Toleration, n *framework.NodeInfo) *framework.Status {
	for i := range n.Taints() {
		t := &n.Taints()[i]
		if (t.Effect == framework.EffectNoSchedule || t.Effect == framework.EffectNoExecute) && !Tolerates(tols, t) {
			return t.Status
		}
	}
	return nil
}

// PreScore keeps the tolerations that can tolerate a PreferNoSchedule
// taint; with none (most pods) it writes no state, which Score reads as
// no tolerations.
func (TaintToleration) PreScore(state *framework.CycleState, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	var tols []*corev1.Toleration
	for _, t := range pod.GetSpec().GetTolerations() {
		if e := t.GetEffect(); e == "" || e == framework.EffectPreferNoSchedule {
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
func (TaintToleration) Score(state *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) int64 {
	s, _ := state.Read(taintTolerationKey).(*taintScoreState)
	return s.score(n)
}

func (TaintToleration) ScoreNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, scores []int64) {
	s, _ := state.Read(taintTolerationKey).(*taintScoreState)
	for i, n := range nodes {
		if n.PreferTaints() == 0 { // most nodes: no call
			scores[i] = 0
			continue
		}
		scores[i] = s.score(n)
	}
}

func (s *taintScoreState) score(n *framework.NodeInfo) int64 {
	if n.PreferTaints() == 0 {
		return 0
	}
	var tols []*corev1.Toleration
	if s != nil {
		tols = s.tolerations
	}
	var count int64
	for i := range n.Taints() {
		t := &n.Taints()[i]
		if t.Effect == framework.EffectPreferNoSchedule && !Tolerates(tols, t) {
			count++
		}
	}
	return count
}

func (pl TaintToleration) ScoreExtensions() framework.ScoreExtensions { return pl }

// NormalizeScore reverses: the node with the most untolerated taints
// scores 0, every node 100 when none has any.
func (TaintToleration) NormalizeScore(_ *framework.CycleState, _ *corev1.Pod, scores []int64) *framework.Status {
	framework.DefaultNormalizeScore(framework.MaxNodeScore, true, scores)
	return nil
}

// tolerates reports whether any toleration tolerates the taint.
func Tolerates(tols []*corev1.Toleration, t *framework.Taint) bool {
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
func toleratesTaint(tol *corev1.Toleration, t *framework.Taint) bool {
	if e := tol.GetEffect(); e != "" && e != t.Effect {
		return false
	}
	if k := tol.GetKey(); k != "" && k != t.Key {
		return false
	}
	switch tol.GetOperator() {
	case "", framework.OpEqual:
		return tol.GetValue() == t.Value
	case framework.OpExists:
		return true
	default:
		return false
	}
}

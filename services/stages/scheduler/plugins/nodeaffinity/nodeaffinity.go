package nodeaffinity

import (
	"strconv"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
)

// NodeAffinityName is the NodeAffinity plugin's name.
const NodeAffinityName = "NodeAffinity"

// ReasonNodeAffinity is NodeAffinity's reason.
const ReasonNodeAffinity = "node(s) didn't match Pod's node affinity/selector"

// NodeAffinity is kube-scheduler's NodeAffinity: its filter requires
// spec.nodeSelector and the required node affinity to match the node; its
// score sums the weights of the preferred terms the node matches
// (normalized across the feasible nodes). PreFilter and PreScore parse the
// terms once per cycle, and skip a pod without any.
type NodeAffinity struct{}

var (
	_ framework.PreFilterPlugin = NodeAffinity{}
	_ framework.FilterPlugin    = NodeAffinity{}
	_ framework.BatchFilter     = NodeAffinity{}
	_ framework.PreScorePlugin  = NodeAffinity{}
	_ framework.ScorePlugin     = NodeAffinity{}
	_ framework.BatchScorer     = NodeAffinity{}
)

var (
	nodeAffinityFilterKey = framework.NewStateKey("PreFilter" + NodeAffinityName)
	nodeAffinityScoreKey  = framework.NewStateKey("PreScore" + NodeAffinityName)
	statusNodeAffinity    = framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonNodeAffinity)
)

// FilterState is the pod's node selector and required terms.
type FilterState struct {
	selector    []labelPair
	required    []selectorTerm // ORed
	hasRequired bool
}

type labelPair struct{ key, value string }

// nodeAffinityScoreState is the pod's preferred terms.
type nodeAffinityScoreState struct{ preferred []preferredTerm }

type preferredTerm struct {
	weight int64
	term   selectorTerm
}

func (NodeAffinity) Name() string { return NodeAffinityName }

func (NodeAffinity) PreFilter(state *framework.CycleState, pod *corev1.Pod) *framework.Status {
	s := NewFilterState(pod)
	if s == nil {
		return framework.SkipStatus()
	}
	state.Write(nodeAffinityFilterKey, s)
	return nil
}

// NewFilterState parses the pod's node selector and required
// node affinity; nil when it has neither (every node matches).
func NewFilterState(pod *corev1.Pod) *FilterState {
	spec := pod.GetSpec()
	req := spec.GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()
	if len(spec.GetNodeSelector()) == 0 && req == nil {
		return nil
	}
	s := &FilterState{}
	for k, v := range spec.GetNodeSelector() {
		s.selector = append(s.selector, labelPair{k, v})
	}
	if req != nil {
		s.hasRequired = true
		for _, t := range req.GetNodeSelectorTerms() {
			s.required = append(s.required, newSelectorTerm(t))
		}
	}
	return s
}

func (NodeAffinity) Filter(state *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	s, _ := state.Read(nodeAffinityFilterKey).(*FilterState)
	return s.filter(n)
}

func (NodeAffinity) FilterNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, statuses []*framework.Status) {
	s, _ := state.Read(nodeAffinityFilterKey).(*FilterState)
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i] = s.filter(n)
		}
	}
}

// filter is NodeAffinity's verdict on n; nil state passes every node.
func (s *FilterState) filter(n *framework.NodeInfo) *framework.Status {
	if s != nil && !s.Matches(n) {
		return statusNodeAffinity
	}
	return nil
}

// matches requires spec.nodeSelector and the required node affinity to
// both match.
func (s *FilterState) Matches(n *framework.NodeInfo) bool {
	for _, kv := range s.selector {
		if v, ok := n.Labels()[kv.key]; !ok || v != kv.value {
			return false
		}
	}
	if !s.hasRequired {
		return true
	}
	for i := range s.required {
		if s.required[i].matches(n) {
			return true
		}
	}
	return false
}

func (NodeAffinity) PreScore(state *framework.CycleState, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	var preferred []preferredTerm
	for _, t := range pod.GetSpec().GetAffinity().GetNodeAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution() {
		if t.GetWeight() == 0 {
			continue
		}
		preferred = append(preferred, preferredTerm{weight: int64(t.GetWeight()), term: newSelectorTerm(t.GetPreference())})
	}
	if len(preferred) == 0 {
		return framework.SkipStatus() // before allocating the state: most pods prefer nothing
	}
	state.Write(nodeAffinityScoreKey, &nodeAffinityScoreState{preferred: preferred})
	return nil
}

// Score is the summed weight of the preferred terms the node matches.
func (NodeAffinity) Score(state *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) int64 {
	s, _ := state.Read(nodeAffinityScoreKey).(*nodeAffinityScoreState)
	return s.score(n)
}

func (NodeAffinity) ScoreNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, scores []int64) {
	s, _ := state.Read(nodeAffinityScoreKey).(*nodeAffinityScoreState)
	for i, n := range nodes {
		scores[i] = s.score(n)
	}
}

func (s *nodeAffinityScoreState) score(n *framework.NodeInfo) int64 {
	if s == nil {
		return 0
	}
	var sum int64
	for i := range s.preferred {
		if s.preferred[i].term.matches(n) {
			sum += s.preferred[i].weight
		}
	}
	return sum
}

func (pl NodeAffinity) ScoreExtensions() framework.ScoreExtensions { return pl }

// NormalizeScore scales so that the best-matching node scores 100.
func (NodeAffinity) NormalizeScore(_ *framework.CycleState, _ *corev1.Pod, scores []int64) *framework.Status {
	framework.DefaultNormalizeScore(framework.MaxNodeScore, false, scores)
	return nil
}

// selectorTerm is a parsed NodeSelectorTerm: its expressions are ANDed. An
// empty or invalid term matches no node, as in Kubernetes.
type selectorTerm struct {
	exprs, fields []framework.Requirement
	invalid       bool
}

func newSelectorTerm(t *corev1.NodeSelectorTerm) selectorTerm {
	var st selectorTerm
	for _, r := range t.GetMatchExpressions() {
		req, ok := framework.ParseRequirement(r.GetKey(), r.GetOperator(), r.GetValues())
		switch req.Op {
		case "Gt", "Lt":
			if len(req.Values) != 1 {
				st.invalid = true
				break
			}
			num, err := strconv.ParseInt(req.Values[0], 10, 64)
			st.invalid = st.invalid || err != nil
			req.Num = num
		default:
			st.invalid = st.invalid || !ok
		}
		st.exprs = append(st.exprs, req)
	}
	for _, r := range t.GetMatchFields() {
		req := framework.Requirement{Key: r.GetKey(), Op: r.GetOperator(), Values: r.GetValues()}
		// Kubernetes supports metadata.name with In or NotIn and one value.
		if req.Key != "metadata.name" || (req.Op != "In" && req.Op != "NotIn") || len(req.Values) != 1 {
			st.invalid = true
		}
		st.fields = append(st.fields, req)
	}
	return st
}

func (t *selectorTerm) matches(n *framework.NodeInfo) bool {
	if t.invalid || (len(t.exprs) == 0 && len(t.fields) == 0) {
		return false
	}
	for i := range t.exprs {
		r := &t.exprs[i]
		v, ok := n.Labels()[r.Key]
		if !r.Matches(v, ok) {
			return false
		}
	}
	for i := range t.fields {
		if !t.fields[i].Matches(n.Name(), true) {
			return false
		}
	}
	return true
}

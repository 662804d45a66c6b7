package scheduler

import (
	"strconv"

	"github.com/podflow/podflow/proto/corev1"
)

// NodeAffinityName is the NodeAffinity plugin's name.
const NodeAffinityName = "NodeAffinity"

// ReasonNodeAffinity is NodeAffinity's reason.
const ReasonNodeAffinity = "node(s) didn't match Pod's node affinity/selector"

// nodeAffinity is kube-scheduler's NodeAffinity: its filter requires
// spec.nodeSelector and the required node affinity to match the node; its
// score sums the weights of the preferred terms the node matches
// (normalized across the feasible nodes). PreFilter and PreScore parse the
// terms once per cycle, and skip a pod without any.
type nodeAffinity struct{}

var (
	_ PreFilterPlugin = nodeAffinity{}
	_ FilterPlugin    = nodeAffinity{}
	_ BatchFilter     = nodeAffinity{}
	_ PreScorePlugin  = nodeAffinity{}
	_ ScorePlugin     = nodeAffinity{}
	_ BatchScorer     = nodeAffinity{}
)

var (
	nodeAffinityFilterKey = NewStateKey("PreFilter" + NodeAffinityName)
	nodeAffinityScoreKey  = NewStateKey("PreScore" + NodeAffinityName)
	statusNodeAffinity    = NewStatus(UnschedulableAndUnresolvable, ReasonNodeAffinity)
)

// nodeAffinityFilterState is the pod's node selector and required terms.
type nodeAffinityFilterState struct {
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

func (nodeAffinity) Name() string { return NodeAffinityName }

func (nodeAffinity) PreFilter(state *CycleState, pod *corev1.Pod) *Status {
	s := newNodeAffinityFilterState(pod)
	if s == nil {
		return skipStatus
	}
	state.Write(nodeAffinityFilterKey, s)
	return nil
}

// newNodeAffinityFilterState parses the pod's node selector and required
// node affinity; nil when it has neither (every node matches).
func newNodeAffinityFilterState(pod *corev1.Pod) *nodeAffinityFilterState {
	spec := pod.GetSpec()
	req := spec.GetAffinity().GetNodeAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()
	if len(spec.GetNodeSelector()) == 0 && req == nil {
		return nil
	}
	s := &nodeAffinityFilterState{}
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

func (nodeAffinity) Filter(state *CycleState, _ *corev1.Pod, n *NodeInfo) *Status {
	s, _ := state.Read(nodeAffinityFilterKey).(*nodeAffinityFilterState)
	return s.filter(n)
}

func (nodeAffinity) FilterNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, statuses []*Status) {
	s, _ := state.Read(nodeAffinityFilterKey).(*nodeAffinityFilterState)
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i] = s.filter(n)
		}
	}
}

// filter is NodeAffinity's verdict on n; nil state passes every node.
func (s *nodeAffinityFilterState) filter(n *NodeInfo) *Status {
	if s != nil && !s.matches(n) {
		return statusNodeAffinity
	}
	return nil
}

// matches requires spec.nodeSelector and the required node affinity to
// both match.
func (s *nodeAffinityFilterState) matches(n *NodeInfo) bool {
	for _, kv := range s.selector {
		if v, ok := n.labels[kv.key]; !ok || v != kv.value {
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

func (nodeAffinity) PreScore(state *CycleState, pod *corev1.Pod, _ []*NodeInfo) *Status {
	var preferred []preferredTerm
	for _, t := range pod.GetSpec().GetAffinity().GetNodeAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution() {
		if t.GetWeight() == 0 {
			continue
		}
		preferred = append(preferred, preferredTerm{weight: int64(t.GetWeight()), term: newSelectorTerm(t.GetPreference())})
	}
	if len(preferred) == 0 {
		return skipStatus // before allocating the state: most pods prefer nothing
	}
	state.Write(nodeAffinityScoreKey, &nodeAffinityScoreState{preferred: preferred})
	return nil
}

// Score is the summed weight of the preferred terms the node matches.
func (nodeAffinity) Score(state *CycleState, _ *corev1.Pod, n *NodeInfo) int64 {
	s, _ := state.Read(nodeAffinityScoreKey).(*nodeAffinityScoreState)
	return s.score(n)
}

func (nodeAffinity) ScoreNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, scores []int64) {
	s, _ := state.Read(nodeAffinityScoreKey).(*nodeAffinityScoreState)
	for i, n := range nodes {
		scores[i] = s.score(n)
	}
}

func (s *nodeAffinityScoreState) score(n *NodeInfo) int64 {
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

func (pl nodeAffinity) ScoreExtensions() ScoreExtensions { return pl }

// NormalizeScore scales so that the best-matching node scores 100.
func (nodeAffinity) NormalizeScore(_ *CycleState, _ *corev1.Pod, scores []int64) *Status {
	DefaultNormalizeScore(MaxNodeScore, false, scores)
	return nil
}

// selectorTerm is a parsed NodeSelectorTerm: its expressions are ANDed. An
// empty or invalid term matches no node, as in Kubernetes.
type selectorTerm struct {
	exprs, fields []requirement
	invalid       bool
}

type requirement struct {
	key    string
	op     string
	values []string
	num    int64 // Gt, Lt
}

func newSelectorTerm(t *corev1.NodeSelectorTerm) selectorTerm {
	var st selectorTerm
	for _, r := range t.GetMatchExpressions() {
		req, ok := setRequirement(r.GetKey(), r.GetOperator(), r.GetValues())
		switch req.op {
		case "Gt", "Lt":
			if len(req.values) != 1 {
				st.invalid = true
				break
			}
			num, err := strconv.ParseInt(req.values[0], 10, 64)
			st.invalid = st.invalid || err != nil
			req.num = num
		default:
			st.invalid = st.invalid || !ok
		}
		st.exprs = append(st.exprs, req)
	}
	for _, r := range t.GetMatchFields() {
		req := requirement{key: r.GetKey(), op: r.GetOperator(), values: r.GetValues()}
		// Kubernetes supports metadata.name with In or NotIn and one value.
		if req.key != "metadata.name" || (req.op != "In" && req.op != "NotIn") || len(req.values) != 1 {
			st.invalid = true
		}
		st.fields = append(st.fields, req)
	}
	return st
}

func (t *selectorTerm) matches(n *NodeInfo) bool {
	if t.invalid || (len(t.exprs) == 0 && len(t.fields) == 0) {
		return false
	}
	for i := range t.exprs {
		r := &t.exprs[i]
		v, ok := n.labels[r.key]
		if !r.matches(v, ok) {
			return false
		}
	}
	for i := range t.fields {
		if !t.fields[i].matches(n.name, true) {
			return false
		}
	}
	return true
}

// setRequirement returns the requirement of an In, NotIn, Exists or
// DoesNotExist expression; ok is false when it is invalid (In and NotIn
// need values, Exists and DoesNotExist take none) or has another operator.
func setRequirement(key, op string, values []string) (req requirement, ok bool) {
	req = requirement{key: key, op: op, values: values}
	switch op {
	case "In", "NotIn":
		return req, len(values) != 0
	case "Exists", "DoesNotExist":
		return req, len(values) == 0
	}
	return req, false
}

// matches applies the requirement to a label value (ok: the label exists),
// with Kubernetes' label selector semantics.
func (r *requirement) matches(v string, ok bool) bool {
	switch r.op {
	case "In":
		return ok && contains(r.values, v)
	case "NotIn":
		return !ok || !contains(r.values, v)
	case "Exists":
		return ok
	case "DoesNotExist":
		return !ok
	case "Gt", "Lt":
		if !ok {
			return false
		}
		num, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return false
		}
		return (r.op == "Gt" && num > r.num) || (r.op == "Lt" && num < r.num)
	}
	return false
}

func contains(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}

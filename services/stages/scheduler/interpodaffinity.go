package scheduler

import (
	"github.com/podflow/podflow/proto/corev1"
)

// InterPodAffinityName is the InterPodAffinity plugin's name.
const InterPodAffinityName = "InterPodAffinity"

// InterPodAffinity's reasons, kube-scheduler's words.
const (
	ReasonPodAffinity             = "node(s) didn't match pod affinity rules"
	ReasonPodAntiAffinity         = "node(s) didn't match pod anti-affinity rules"
	ReasonExistingPodAntiAffinity = "node(s) didn't satisfy existing pods anti-affinity rules"
)

// hardPodAffinityWeight is kube-scheduler's default
// hardPodAffinitySymmetricWeight: an existing pod's required affinity
// term that the incoming pod matches scores like a preferred term of
// this weight.
const hardPodAffinityWeight = 1

// interPodAffinity is kube-scheduler's InterPodAffinity. Its filter
// requires, for a node:
//
//   - the pod's required affinity: every term's topology domain of the
//     node holds a pod matching all terms (or, when no pod anywhere
//     matches them, the pod matches its own terms: the first of a group);
//   - the pod's required anti-affinity: no term's domain of the node
//     holds a pod the term selects;
//   - the existing pods' required anti-affinity (symmetry): no pod whose
//     term selects the incoming pod is in that term's domain of the node.
//
// Its score adds, per topology domain, the weights of the pod's preferred
// affinity terms that existing pods there match (anti-affinity:
// subtracts), and of the existing pods' preferred terms (and required
// affinity terms, with weight 1) the pod matches; normalized to 0–100
// between the lowest and highest node.
//
// The cache keeps each node's pods with their parsed terms and counts
// the pods with pod (anti-)affinity, so a pod without terms skips the
// filter unless some pod has required anti-affinity, and skips the score
// unless some pod has any term; the counts per domain are computed once
// per cycle in PreFilter and PreScore.
type interPodAffinity struct{}

var (
	_ PreFilterPlugin = interPodAffinity{}
	_ FilterPlugin    = interPodAffinity{}
	_ BatchFilter     = interPodAffinity{}
	_ PreScorePlugin  = interPodAffinity{}
	_ ScorePlugin     = interPodAffinity{}
	_ BatchScorer     = interPodAffinity{}
)

var (
	podAffinityFilterKey  = NewStateKey("PreFilter" + InterPodAffinityName)
	podAffinityScoreKey   = NewStateKey("PreScore" + InterPodAffinityName)
	statusPodAffinity     = NewStatus(UnschedulableAndUnresolvable, ReasonPodAffinity)
	statusPodAntiAffinity = NewStatus(Unschedulable, ReasonPodAntiAffinity)
	statusExistingAnti    = NewStatus(Unschedulable, ReasonExistingPodAntiAffinity)
)

// podAffinityFilterState counts, per topology pair, the pods matching all
// the pod's required affinity terms, those its anti-affinity terms
// select, and the existing pods whose anti-affinity selects the pod.
type podAffinityFilterState struct {
	required, requiredAnti []affinityTerm
	selfMatchesAll         bool
	affinity, anti         map[topologyPair]int64
	existingAnti           map[topologyPair]int64
}

func (interPodAffinity) Name() string { return InterPodAffinityName }

// incomingMeta is the pod being scheduled as the terms see it.
func incomingMeta(pod *corev1.Pod) podMeta {
	return podMeta{namespace: pod.GetMetadata().GetNamespace(), labels: pod.GetMetadata().GetLabels()}
}

func matchesAll(terms []affinityTerm, p *podMeta, snap *Snapshot) bool {
	for i := range terms {
		if !terms[i].matches(p, snap) {
			return false
		}
	}
	return true
}

// add counts delta for the term's pair on n, if n has the topology key.
func addPair(m map[topologyPair]int64, n *NodeInfo, key string, delta int64) {
	if v, ok := n.labels[key]; ok {
		m[topologyPair{key, v}] += delta
	}
}

func (interPodAffinity) PreFilter(state *CycleState, pod *corev1.Pod) *Status {
	snap := state.Snapshot()
	a := pod.GetSpec().GetAffinity()
	hasTerms := len(a.GetPodAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution())+
		len(a.GetPodAntiAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()) > 0
	if snap == nil || (!hasTerms && snap.podsWithRequiredAnti == 0) {
		return skipStatus
	}
	s := &podAffinityFilterState{existingAnti: map[topologyPair]int64{}}
	me := incomingMeta(pod)
	if snap.podsWithRequiredAnti > 0 {
		for _, n := range snap.nodes {
			if n.podsWithRequiredAnti == 0 {
				continue
			}
			for _, p := range n.pods {
				if p.affinity == nil {
					continue
				}
				for i := range p.affinity.requiredAnti {
					if t := &p.affinity.requiredAnti[i]; t.matches(&me, snap) {
						addPair(s.existingAnti, n, t.topologyKey, 1)
					}
				}
			}
		}
	}
	if hasTerms {
		terms := newPodAffinityTerms(pod)
		s.required, s.requiredAnti = terms.required, terms.requiredAnti
		s.selfMatchesAll = matchesAll(s.required, &me, snap)
		s.affinity, s.anti = map[topologyPair]int64{}, map[topologyPair]int64{}
		for _, n := range snap.nodes {
			for _, p := range n.pods {
				if len(s.required) > 0 && matchesAll(s.required, p, snap) {
					for i := range s.required {
						addPair(s.affinity, n, s.required[i].topologyKey, 1)
					}
				}
				for i := range s.requiredAnti {
					if t := &s.requiredAnti[i]; t.matches(p, snap) {
						addPair(s.anti, n, t.topologyKey, 1)
					}
				}
			}
		}
	}
	state.Write(podAffinityFilterKey, s)
	return nil
}

func (interPodAffinity) Filter(state *CycleState, _ *corev1.Pod, n *NodeInfo) *Status {
	s, _ := state.Read(podAffinityFilterKey).(*podAffinityFilterState)
	return s.filter(n)
}

func (interPodAffinity) FilterNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, statuses []*Status) {
	s, _ := state.Read(podAffinityFilterKey).(*podAffinityFilterState)
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i] = s.filter(n)
		}
	}
}

func (s *podAffinityFilterState) filter(n *NodeInfo) *Status {
	if s == nil {
		return nil
	}
	if !s.satisfiesAffinity(n) {
		return statusPodAffinity
	}
	for i := range s.requiredAnti {
		if v, ok := n.labels[s.requiredAnti[i].topologyKey]; ok && s.anti[topologyPair{s.requiredAnti[i].topologyKey, v}] > 0 {
			return statusPodAntiAffinity
		}
	}
	if len(s.existingAnti) > 0 {
		for k, v := range n.labels {
			if s.existingAnti[topologyPair{k, v}] > 0 {
				return statusExistingAnti
			}
		}
	}
	return nil
}

// satisfiesAffinity is kube-scheduler's satisfyPodAffinity.
func (s *podAffinityFilterState) satisfiesAffinity(n *NodeInfo) bool {
	podsExist := true
	for i := range s.required {
		v, ok := n.labels[s.required[i].topologyKey]
		if !ok {
			return false // every topology key must be on the node
		}
		if s.affinity[topologyPair{s.required[i].topologyKey, v}] <= 0 {
			podsExist = false
		}
	}
	// The first pod of a group with affinity to itself may go anywhere.
	return podsExist || s.firstOfGroup()
}

// firstOfGroup reports whether the pod has required affinity terms that
// no pod matches and it matches itself: kube-scheduler's exemption for
// the first pod of a self-affine group, under which every node that has
// the terms' keys passes. Across replicas its bind is guarded by anchor
// records (affinityanchor.go).
func (s *podAffinityFilterState) firstOfGroup() bool {
	return s != nil && len(s.required) > 0 && len(s.affinity) == 0 && s.selfMatchesAll
}

// podAffinityScoreState is the score per topology key and value.
type podAffinityScoreState struct {
	scores map[string]map[string]int64
}

func (s *podAffinityScoreState) add(n *NodeInfo, key string, weight int64) {
	v, ok := n.labels[key]
	if !ok || weight == 0 {
		return
	}
	m := s.scores[key]
	if m == nil {
		m = map[string]int64{}
		s.scores[key] = m
	}
	m[v] += weight
}

// addTerms adds sign times the weight of each term that selects p.
func (s *podAffinityScoreState) addTerms(terms []weightedAffinityTerm, p *podMeta, snap *Snapshot, n *NodeInfo, sign int64) {
	for i := range terms {
		if terms[i].term.matches(p, snap) {
			s.add(n, terms[i].term.topologyKey, sign*terms[i].weight)
		}
	}
}

func (interPodAffinity) PreScore(state *CycleState, pod *corev1.Pod, _ []*NodeInfo) *Status {
	snap := state.Snapshot()
	a := pod.GetSpec().GetAffinity()
	hasPreferred := len(a.GetPodAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution())+
		len(a.GetPodAntiAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution()) > 0
	if snap == nil || (!hasPreferred && snap.podsWithAffinity == 0) {
		return skipStatus
	}
	var own podAffinityTerms
	if t := newPodAffinityTerms(pod); t != nil {
		own = *t
	}
	me := incomingMeta(pod)
	s := &podAffinityScoreState{scores: map[string]map[string]int64{}}
	for _, n := range snap.nodes {
		if (!hasPreferred && n.podsWithAffinity == 0) || len(n.labels) == 0 {
			continue
		}
		for _, p := range n.pods {
			if hasPreferred {
				s.addTerms(own.preferred, p, snap, n, 1)
				s.addTerms(own.preferredAnti, p, snap, n, -1)
			}
			if p.affinity == nil {
				continue
			}
			for i := range p.affinity.required {
				if t := &p.affinity.required[i]; t.matches(&me, snap) {
					s.add(n, t.topologyKey, hardPodAffinityWeight)
				}
			}
			s.addTerms(p.affinity.preferred, &me, snap, n, 1)
			s.addTerms(p.affinity.preferredAnti, &me, snap, n, -1)
		}
	}
	if len(s.scores) == 0 {
		return skipStatus // every node scores the same
	}
	state.Write(podAffinityScoreKey, s)
	return nil
}

func (interPodAffinity) Score(state *CycleState, _ *corev1.Pod, n *NodeInfo) int64 {
	s, _ := state.Read(podAffinityScoreKey).(*podAffinityScoreState)
	return s.score(n)
}

func (interPodAffinity) ScoreNodes(state *CycleState, _ *corev1.Pod, nodes []*NodeInfo, scores []int64) {
	s, _ := state.Read(podAffinityScoreKey).(*podAffinityScoreState)
	for i, n := range nodes {
		scores[i] = s.score(n)
	}
}

func (s *podAffinityScoreState) score(n *NodeInfo) int64 {
	if s == nil {
		return 0
	}
	var sum int64
	for key, values := range s.scores {
		if v, ok := n.labels[key]; ok {
			sum += values[v]
		}
	}
	return sum
}

func (pl interPodAffinity) ScoreExtensions() ScoreExtensions { return pl }

// NormalizeScore maps the lowest node to 0 and the highest to 100.
func (interPodAffinity) NormalizeScore(_ *CycleState, _ *corev1.Pod, scores []int64) *Status {
	if len(scores) == 0 {
		return nil
	}
	lo, hi := scores[0], scores[0]
	for _, s := range scores {
		lo, hi = min(lo, s), max(hi, s)
	}
	for i, s := range scores {
		if hi > lo {
			scores[i] = MaxNodeScore * (s - lo) / (hi - lo)
		} else {
			scores[i] = 0
		}
	}
	return nil
}

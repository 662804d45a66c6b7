package interpodaffinity

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
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

// InterPodAffinity is kube-scheduler's InterPodAffinity. Its filter
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
type InterPodAffinity struct{}

var (
	_ framework.PreFilterPlugin = InterPodAffinity{}
	_ framework.FilterPlugin    = InterPodAffinity{}
	_ framework.BatchFilter     = InterPodAffinity{}
	_ framework.PreScorePlugin  = InterPodAffinity{}
	_ framework.ScorePlugin     = InterPodAffinity{}
	_ framework.BatchScorer     = InterPodAffinity{}
)

var (
	FilterKey             = framework.NewStateKey("PreFilter" + InterPodAffinityName)
	podAffinityScoreKey   = framework.NewStateKey("PreScore" + InterPodAffinityName)
	statusPodAffinity     = framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonPodAffinity)
	statusPodAntiAffinity = framework.NewStatus(framework.Unschedulable, ReasonPodAntiAffinity)
	statusExistingAnti    = framework.NewStatus(framework.Unschedulable, ReasonExistingPodAntiAffinity)
)

// FilterState counts, per topology pair, the pods matching all
// the pod's required affinity terms, those its anti-affinity terms
// select, and the existing pods whose anti-affinity selects the pod.
type FilterState struct {
	required, requiredAnti []framework.AffinityTerm
	selfMatchesAll         bool
	affinity, anti         map[framework.TopologyPair]int64
	existingAnti           map[framework.TopologyPair]int64
}

func (InterPodAffinity) Name() string { return InterPodAffinityName }

// IncomingMeta is the pod being scheduled as the terms see it.
func IncomingMeta(pod *corev1.Pod) framework.PodMeta {
	return framework.PodMeta{Namespace: pod.GetMetadata().GetNamespace(), Labels: pod.GetMetadata().GetLabels()}
}

func matchesAll(terms []framework.AffinityTerm, p *framework.PodMeta, snap *framework.Snapshot) bool {
	for i := range terms {
		if !terms[i].Matches(p, snap) {
			return false
		}
	}
	return true
}

// add counts delta for the term's pair on n, if n has the topology key.
func addPair(m map[framework.TopologyPair]int64, n *framework.NodeInfo, key string, delta int64) {
	if v, ok := n.Labels()[key]; ok {
		m[framework.TopologyPair{Key: key, Value: v}] += delta
	}
}

func (InterPodAffinity) PreFilter(state *framework.CycleState, pod *corev1.Pod) *framework.Status {
	snap := state.Snapshot()
	a := pod.GetSpec().GetAffinity()
	hasTerms := len(a.GetPodAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution())+
		len(a.GetPodAntiAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()) > 0
	if snap == nil || (!hasTerms && snap.PodsWithRequiredAnti == 0) {
		return framework.SkipStatus()
	}
	s := &FilterState{existingAnti: map[framework.TopologyPair]int64{}}
	me := IncomingMeta(pod)
	if snap.PodsWithRequiredAnti > 0 {
		for _, n := range snap.NodeList {
			if n.PodsWithRequiredAnti() == 0 {
				continue
			}
			for _, p := range n.Pods() {
				if p.Affinity == nil {
					continue
				}
				for i := range p.Affinity.RequiredAnti {
					if t := &p.Affinity.RequiredAnti[i]; t.Matches(&me, snap) {
						addPair(s.existingAnti, n, t.TopologyKey, 1)
					}
				}
			}
		}
	}
	if hasTerms {
		terms := framework.NewPodAffinityTerms(pod)
		s.required, s.requiredAnti = terms.Required, terms.RequiredAnti
		s.selfMatchesAll = matchesAll(s.required, &me, snap)
		s.affinity, s.anti = map[framework.TopologyPair]int64{}, map[framework.TopologyPair]int64{}
		for _, n := range snap.NodeList {
			for _, p := range n.Pods() {
				if len(s.required) > 0 && matchesAll(s.required, p, snap) {
					for i := range s.required {
						addPair(s.affinity, n, s.required[i].TopologyKey, 1)
					}
				}
				for i := range s.requiredAnti {
					if t := &s.requiredAnti[i]; t.Matches(p, snap) {
						addPair(s.anti, n, t.TopologyKey, 1)
					}
				}
			}
		}
	}
	state.Write(FilterKey, s)
	return nil
}

func (InterPodAffinity) Filter(state *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	s, _ := state.Read(FilterKey).(*FilterState)
	return s.filter(n)
}

func (InterPodAffinity) FilterNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, statuses []*framework.Status) {
	s, _ := state.Read(FilterKey).(*FilterState)
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i] = s.filter(n)
		}
	}
}

func (s *FilterState) filter(n *framework.NodeInfo) *framework.Status {
	if s == nil {
		return nil
	}
	if !s.satisfiesAffinity(n) {
		return statusPodAffinity
	}
	for i := range s.requiredAnti {
		if v, ok := n.Labels()[s.requiredAnti[i].TopologyKey]; ok && s.anti[framework.TopologyPair{Key: s.requiredAnti[i].TopologyKey, Value: v}] > 0 {
			return statusPodAntiAffinity
		}
	}
	if len(s.existingAnti) > 0 {
		for k, v := range n.Labels() {
			if s.existingAnti[framework.TopologyPair{Key: k, Value: v}] > 0 {
				return statusExistingAnti
			}
		}
	}
	return nil
}

// satisfiesAffinity is kube-scheduler's satisfyPodAffinity.
func (s *FilterState) satisfiesAffinity(n *framework.NodeInfo) bool {
	podsExist := true
	for i := range s.required {
		v, ok := n.Labels()[s.required[i].TopologyKey]
		if !ok {
			return false // every topology key must be on the node
		}
		if s.affinity[framework.TopologyPair{Key: s.required[i].TopologyKey, Value: v}] <= 0 {
			podsExist = false
		}
	}
	// The first pod of a group with affinity to itself may go anywhere.
	return podsExist || s.FirstOfGroup()
}

// firstOfGroup reports whether the pod has required affinity terms that
// no pod matches and it matches itself: kube-scheduler's exemption for
// the first pod of a self-affine group, under which every node that has
// the terms' keys passes. Across replicas its bind is guarded by anchor
// records (affinityanchor.go).
func (s *FilterState) FirstOfGroup() bool {
	return s != nil && len(s.required) > 0 && len(s.affinity) == 0 && s.selfMatchesAll
}

// podAffinityScoreState is the score per topology key and value.
type podAffinityScoreState struct {
	scores map[string]map[string]int64
}

func (s *podAffinityScoreState) add(n *framework.NodeInfo, key string, weight int64) {
	v, ok := n.Labels()[key]
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
func (s *podAffinityScoreState) addTerms(terms []framework.WeightedAffinityTerm, p *framework.PodMeta, snap *framework.Snapshot, n *framework.NodeInfo, sign int64) {
	for i := range terms {
		if terms[i].Term.Matches(p, snap) {
			s.add(n, terms[i].Term.TopologyKey, sign*terms[i].Weight)
		}
	}
}

func (InterPodAffinity) PreScore(state *framework.CycleState, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	snap := state.Snapshot()
	a := pod.GetSpec().GetAffinity()
	hasPreferred := len(a.GetPodAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution())+
		len(a.GetPodAntiAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution()) > 0
	if snap == nil || (!hasPreferred && snap.PodsWithAffinity == 0) {
		return framework.SkipStatus()
	}
	var own framework.PodAffinityTerms
	if t := framework.NewPodAffinityTerms(pod); t != nil {
		own = *t
	}
	me := IncomingMeta(pod)
	s := &podAffinityScoreState{scores: map[string]map[string]int64{}}
	for _, n := range snap.NodeList {
		if (!hasPreferred && n.PodsWithAffinity() == 0) || len(n.Labels()) == 0 {
			continue
		}
		for _, p := range n.Pods() {
			if hasPreferred {
				s.addTerms(own.Preferred, p, snap, n, 1)
				s.addTerms(own.PreferredAnti, p, snap, n, -1)
			}
			if p.Affinity == nil {
				continue
			}
			for i := range p.Affinity.Required {
				if t := &p.Affinity.Required[i]; t.Matches(&me, snap) {
					s.add(n, t.TopologyKey, hardPodAffinityWeight)
				}
			}
			s.addTerms(p.Affinity.Preferred, &me, snap, n, 1)
			s.addTerms(p.Affinity.PreferredAnti, &me, snap, n, -1)
		}
	}
	if len(s.scores) == 0 {
		return framework.SkipStatus() // every node scores the same
	}
	state.Write(podAffinityScoreKey, s)
	return nil
}

func (InterPodAffinity) Score(state *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) int64 {
	s, _ := state.Read(podAffinityScoreKey).(*podAffinityScoreState)
	return s.score(n)
}

func (InterPodAffinity) ScoreNodes(state *framework.CycleState, _ *corev1.Pod, nodes []*framework.NodeInfo, scores []int64) {
	s, _ := state.Read(podAffinityScoreKey).(*podAffinityScoreState)
	for i, n := range nodes {
		scores[i] = s.score(n)
	}
}

func (s *podAffinityScoreState) score(n *framework.NodeInfo) int64 {
	if s == nil {
		return 0
	}
	var sum int64
	for key, values := range s.scores {
		if v, ok := n.Labels()[key]; ok {
			sum += values[v]
		}
	}
	return sum
}

func (pl InterPodAffinity) ScoreExtensions() framework.ScoreExtensions { return pl }

// NormalizeScore maps the lowest node to 0 and the highest to 100.
func (InterPodAffinity) NormalizeScore(_ *framework.CycleState, _ *corev1.Pod, scores []int64) *framework.Status {
	if len(scores) == 0 {
		return nil
	}
	lo, hi := scores[0], scores[0]
	for _, s := range scores {
		lo, hi = min(lo, s), max(hi, s)
	}
	for i, s := range scores {
		if hi > lo {
			scores[i] = framework.MaxNodeScore * (s - lo) / (hi - lo)
		} else {
			scores[i] = 0
		}
	}
	return nil
}

package scheduler

import "github.com/podflow/podflow/proto/corev1"

// What PodTopologySpread and InterPodAffinity read of the pods on a node:
// their namespace, labels and parsed pod (anti-)affinity terms (podMeta,
// kept per node in NodeInfo.pods), and label selectors parsed once.

// podMeta is a pod on a node as the pod-aware plugins see it. It is
// immutable once in a NodeInfo.
type podMeta struct {
	namespace   string
	labels      map[string]string
	terminating bool              // deletionTimestamp set
	affinity    *podAffinityTerms // nil: no pod affinity or anti-affinity
	// What preemption reads: the pod's spec.priority, when it started
	// (status.startTime, else its creation), whether it is terminating
	// because the scheduler preempted it, and its entry (to take it off a
	// copy of its NodeInfo).
	priority  int32
	startNano int64
	preempted bool
	entry     *podEntry
}

// podAffinityTerms are a pod's parsed pod affinity and anti-affinity.
type podAffinityTerms struct {
	required, requiredAnti   []affinityTerm
	preferred, preferredAnti []weightedAffinityTerm
}

type weightedAffinityTerm struct {
	weight int64
	term   affinityTerm
}

// affinityTerm is a parsed PodAffinityTerm of an owner pod: which pods it
// selects (namespaces and labels) and its topology key.
type affinityTerm struct {
	selector    labelSelector
	namespaces  []string       // explicit, or the owner's when neither namespaces nor namespaceSelector is set
	nsSelector  *labelSelector // nil: none ({}: every namespace)
	topologyKey string
}

func newPodMeta(pod *corev1.Pod) podMeta {
	m := podMeta{
		namespace:   pod.GetMetadata().GetNamespace(),
		labels:      pod.GetMetadata().GetLabels(),
		terminating: pod.GetMetadata().GetDeletionTimestamp() != nil,
		priority:    pod.GetSpec().GetPriority(),
		startNano:   podStartTime(pod),
	}
	m.preempted = m.terminating && preemptedByScheduler(pod)
	if a := pod.GetSpec().GetAffinity(); a.GetPodAffinity() != nil || a.GetPodAntiAffinity() != nil {
		m.affinity = newPodAffinityTerms(pod)
	}
	return m
}

// newPodAffinityTerms parses pod's pod affinity and anti-affinity (nil:
// it has no term).
func newPodAffinityTerms(pod *corev1.Pod) *podAffinityTerms {
	a := pod.GetSpec().GetAffinity()
	aff, anti := a.GetPodAffinity(), a.GetPodAntiAffinity()
	t := &podAffinityTerms{
		required:      newAffinityTerms(pod, aff.GetRequiredDuringSchedulingIgnoredDuringExecution()),
		requiredAnti:  newAffinityTerms(pod, anti.GetRequiredDuringSchedulingIgnoredDuringExecution()),
		preferred:     newWeightedTerms(pod, aff.GetPreferredDuringSchedulingIgnoredDuringExecution()),
		preferredAnti: newWeightedTerms(pod, anti.GetPreferredDuringSchedulingIgnoredDuringExecution()),
	}
	if len(t.required)+len(t.requiredAnti)+len(t.preferred)+len(t.preferredAnti) == 0 {
		return nil
	}
	return t
}

func newAffinityTerms(owner *corev1.Pod, terms []*corev1.PodAffinityTerm) []affinityTerm {
	var out []affinityTerm
	for _, t := range terms {
		out = append(out, newAffinityTerm(owner, t))
	}
	return out
}

func newWeightedTerms(owner *corev1.Pod, terms []*corev1.WeightedPodAffinityTerm) []weightedAffinityTerm {
	var out []weightedAffinityTerm
	for _, t := range terms {
		if t.GetWeight() != 0 {
			out = append(out, weightedAffinityTerm{weight: int64(t.GetWeight()), term: newAffinityTerm(owner, t.GetPodAffinityTerm())})
		}
	}
	return out
}

// newAffinityTerm parses t as Kubernetes does: matchLabelKeys and
// mismatchLabelKeys become In and NotIn requirements on the owner's
// values of those labels; no namespaces and no namespaceSelector mean the
// owner's namespace.
func newAffinityTerm(owner *corev1.Pod, t *corev1.PodAffinityTerm) affinityTerm {
	own := owner.GetMetadata().GetLabels()
	at := affinityTerm{
		selector:    newLabelSelector(t.GetLabelSelector(), own, t.GetMatchLabelKeys(), t.GetMismatchLabelKeys()),
		namespaces:  t.GetNamespaces(),
		topologyKey: t.GetTopologyKey(),
	}
	if t.GetNamespaceSelector() != nil {
		s := newLabelSelector(t.GetNamespaceSelector(), nil, nil, nil)
		at.nsSelector = &s
	} else if len(at.namespaces) == 0 {
		at.namespaces = []string{owner.GetMetadata().GetNamespace()}
	}
	return at
}

// matches reports whether the term selects pod p; snap gives the labels
// of p's namespace for a namespaceSelector.
func (t *affinityTerm) matches(p *podMeta, snap *Snapshot) bool {
	if !contains(t.namespaces, p.namespace) && (t.nsSelector == nil || !t.nsSelector.matches(snap.namespaceLabels(p.namespace))) {
		return false
	}
	return t.selector.matches(p.labels)
}

// labelSelector is a parsed metav1.LabelSelector: its requirements are
// ANDed. A nil or invalid selector matches nothing, an empty one
// everything, as in Kubernetes.
type labelSelector struct {
	reqs    []requirement
	nothing bool
}

// newLabelSelector parses s; for each of matchKeys (mismatchKeys) that own
// has, it adds an In (NotIn) requirement on own's value.
func newLabelSelector(s *corev1.LabelSelector, own map[string]string, matchKeys, mismatchKeys []string) labelSelector {
	if s == nil {
		return labelSelector{nothing: true}
	}
	var ls labelSelector
	for k, v := range s.GetMatchLabels() {
		ls.reqs = append(ls.reqs, requirement{key: k, op: "In", values: []string{v}})
	}
	for _, r := range s.GetMatchExpressions() {
		req, ok := setRequirement(r.GetKey(), r.GetOperator(), r.GetValues())
		ls.nothing = ls.nothing || !ok
		ls.reqs = append(ls.reqs, req)
	}
	for _, keys := range []struct {
		op   string
		keys []string
	}{{"In", matchKeys}, {"NotIn", mismatchKeys}} {
		for _, k := range keys.keys {
			if v, ok := own[k]; ok {
				ls.reqs = append(ls.reqs, requirement{key: k, op: keys.op, values: []string{v}})
			}
		}
	}
	return ls
}

func (s *labelSelector) matches(labels map[string]string) bool {
	if s.nothing {
		return false
	}
	for i := range s.reqs {
		v, ok := labels[s.reqs[i].key]
		if !s.reqs[i].matches(v, ok) {
			return false
		}
	}
	return true
}

// topologyPair is a node label: a topology key and the node's value.
type topologyPair struct{ key, value string }

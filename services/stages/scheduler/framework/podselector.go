package framework

import (
	"strconv"

	"github.com/podflow/podflow/proto/corev1"
)

// What PodTopologySpread and InterPodAffinity read of the pods on a node:
// their namespace, labels and parsed pod (anti-)affinity terms (PodMeta,
// kept per node in NodeInfo.pods), and label selectors parsed once.

// PodMeta is a pod on a node as the pod-aware plugins see it. It is
// immutable once in a NodeInfo.
type PodMeta struct {
	Namespace   string
	Labels      map[string]string
	Terminating bool              // deletionTimestamp set
	Affinity    *PodAffinityTerms // nil: no pod affinity or anti-affinity
	// What preemption reads: the pod's spec.priority, when it started
	// (status.startTime, else its creation), whether it is terminating
	// because the scheduler preempted it, and its entry (to take it off a
	// copy of its NodeInfo).
	Priority  int32
	StartNano int64
	Preempted bool
	Entry     *PodEntry
}

// PodAffinityTerms are a pod's parsed pod affinity and anti-affinity.
type PodAffinityTerms struct {
	Required, RequiredAnti   []AffinityTerm
	Preferred, PreferredAnti []WeightedAffinityTerm
}

type WeightedAffinityTerm struct {
	Weight int64
	Term   AffinityTerm
}

// AffinityTerm is a parsed PodAffinityTerm of an owner pod: which pods it
// selects (namespaces and labels) and its topology key.
type AffinityTerm struct {
	selector    LabelSelector
	namespaces  []string       // explicit, or the owner's when neither namespaces nor namespaceSelector is set
	nsSelector  *LabelSelector // nil: none ({}: every namespace)
	TopologyKey string
}

func NewPodMeta(pod *corev1.Pod) PodMeta {
	m := PodMeta{
		Namespace:   pod.GetMetadata().GetNamespace(),
		Labels:      pod.GetMetadata().GetLabels(),
		Terminating: pod.GetMetadata().GetDeletionTimestamp() != nil,
		Priority:    pod.GetSpec().GetPriority(),
		StartNano:   PodStartTime(pod),
	}
	m.Preempted = m.Terminating && PreemptedByScheduler(pod)
	if a := pod.GetSpec().GetAffinity(); a.GetPodAffinity() != nil || a.GetPodAntiAffinity() != nil {
		m.Affinity = NewPodAffinityTerms(pod)
	}
	return m
}

// NewPodAffinityTerms parses pod's pod affinity and anti-affinity (nil:
// it has no term).
func NewPodAffinityTerms(pod *corev1.Pod) *PodAffinityTerms {
	a := pod.GetSpec().GetAffinity()
	aff, anti := a.GetPodAffinity(), a.GetPodAntiAffinity()
	t := &PodAffinityTerms{
		Required:      newAffinityTerms(pod, aff.GetRequiredDuringSchedulingIgnoredDuringExecution()),
		RequiredAnti:  newAffinityTerms(pod, anti.GetRequiredDuringSchedulingIgnoredDuringExecution()),
		Preferred:     newWeightedTerms(pod, aff.GetPreferredDuringSchedulingIgnoredDuringExecution()),
		PreferredAnti: newWeightedTerms(pod, anti.GetPreferredDuringSchedulingIgnoredDuringExecution()),
	}
	if len(t.Required)+len(t.RequiredAnti)+len(t.Preferred)+len(t.PreferredAnti) == 0 {
		return nil
	}
	return t
}

func newAffinityTerms(owner *corev1.Pod, terms []*corev1.PodAffinityTerm) []AffinityTerm {
	var out []AffinityTerm
	for _, t := range terms {
		out = append(out, NewAffinityTerm(owner, t))
	}
	return out
}

func newWeightedTerms(owner *corev1.Pod, terms []*corev1.WeightedPodAffinityTerm) []WeightedAffinityTerm {
	var out []WeightedAffinityTerm
	for _, t := range terms {
		if t.GetWeight() != 0 {
			out = append(out, WeightedAffinityTerm{Weight: int64(t.GetWeight()), Term: NewAffinityTerm(owner, t.GetPodAffinityTerm())})
		}
	}
	return out
}

// NewAffinityTerm parses t as Kubernetes does: matchLabelKeys and
// mismatchLabelKeys become In and NotIn requirements on the owner's
// values of those labels; no namespaces and no namespaceSelector mean the
// owner's namespace.
func NewAffinityTerm(owner *corev1.Pod, t *corev1.PodAffinityTerm) AffinityTerm {
	own := owner.GetMetadata().GetLabels()
	at := AffinityTerm{
		selector:    NewLabelSelector(t.GetLabelSelector(), own, t.GetMatchLabelKeys(), t.GetMismatchLabelKeys()),
		namespaces:  t.GetNamespaces(),
		TopologyKey: t.GetTopologyKey(),
	}
	if t.GetNamespaceSelector() != nil {
		s := NewLabelSelector(t.GetNamespaceSelector(), nil, nil, nil)
		at.nsSelector = &s
	} else if len(at.namespaces) == 0 {
		at.namespaces = []string{owner.GetMetadata().GetNamespace()}
	}
	return at
}

// matches reports whether the term selects pod p; snap gives the labels
// of p's namespace for a namespaceSelector.
func (t *AffinityTerm) Matches(p *PodMeta, snap *Snapshot) bool {
	if !Contains(t.namespaces, p.Namespace) && (t.nsSelector == nil || !t.nsSelector.Matches(snap.NamespaceLabels(p.Namespace))) {
		return false
	}
	return t.selector.Matches(p.Labels)
}

// LabelSelector is a parsed metav1.LabelSelector: its requirements are
// ANDed. A nil or invalid selector matches nothing, an empty one
// everything, as in Kubernetes.
type LabelSelector struct {
	reqs    []Requirement
	nothing bool
}

// NewLabelSelector parses s; for each of matchKeys (mismatchKeys) that own
// has, it adds an In (NotIn) requirement on own's value.
func NewLabelSelector(s *corev1.LabelSelector, own map[string]string, matchKeys, mismatchKeys []string) LabelSelector {
	if s == nil {
		return LabelSelector{nothing: true}
	}
	var ls LabelSelector
	for k, v := range s.GetMatchLabels() {
		ls.reqs = append(ls.reqs, Requirement{Key: k, Op: "In", Values: []string{v}})
	}
	for _, r := range s.GetMatchExpressions() {
		req, ok := ParseRequirement(r.GetKey(), r.GetOperator(), r.GetValues())
		ls.nothing = ls.nothing || !ok
		ls.reqs = append(ls.reqs, req)
	}
	for _, keys := range []struct {
		op   string
		keys []string
	}{{"In", matchKeys}, {"NotIn", mismatchKeys}} {
		for _, k := range keys.keys {
			if v, ok := own[k]; ok {
				ls.reqs = append(ls.reqs, Requirement{Key: k, Op: keys.op, Values: []string{v}})
			}
		}
	}
	return ls
}

func (s *LabelSelector) Matches(labels map[string]string) bool {
	if s.nothing {
		return false
	}
	for i := range s.reqs {
		v, ok := labels[s.reqs[i].Key]
		if !s.reqs[i].Matches(v, ok) {
			return false
		}
	}
	return true
}

// TopologyPair is a node label: a topology key and the node's value.
type TopologyPair struct{ Key, Value string }

type Requirement struct {
	Key    string
	Op     string
	Values []string
	Num    int64 // Gt, Lt
}

// ParseRequirement returns the requirement of an In, NotIn, Exists or
// DoesNotExist expression; ok is false when it is invalid (In and NotIn
// need values, Exists and DoesNotExist take none) or has another operator.
func ParseRequirement(key, op string, values []string) (req Requirement, ok bool) {
	req = Requirement{Key: key, Op: op, Values: values}
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
func (r *Requirement) Matches(v string, ok bool) bool {
	switch r.Op {
	case "In":
		return ok && Contains(r.Values, v)
	case "NotIn":
		return !ok || !Contains(r.Values, v)
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
		return (r.Op == "Gt" && num > r.Num) || (r.Op == "Lt" && num < r.Num)
	}
	return false
}

func Contains(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}

package schedsim

import (
	"fmt"
	"math"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler"
)

// topology replays the nodes, namespaces and pods of a history and checks
// every binding against the pod-aware filters, at the revision of that
// binding: the pods bound then (in the store, with spec.nodeName, not
// Succeeded or Failed) and the nodes there then. The rules come one term
// at a time from the scheduler's matchers (scheduler.AffinityTermSelector,
// SpreadSelector, SpreadNodeFilter); the domains and counts are computed
// here, from the stored objects, independently of the plugins' state.
//
// Anti-affinity is checked exactly at any concurrency: a replica binds
// pods it decided earlier after later ones (its binds to different nodes
// run in parallel), so the store at a binding's revision may lack pods
// the decision counted — which can hide a conflict, never invent one. A
// spread skew or an unmet required affinity can be invented that way (the
// least loaded domain, or the pod the affinity needs, is still in
// flight), so those count as violations only when every replica runs one
// handler at a time (exact: Config.Concurrency 1); otherwise they are
// reported in Report.SpreadSkews and Report.AffinityUnmet.
type topology struct {
	exact      bool
	nodes      map[string]*corev1.Node      // name -> node
	namespaces map[string]map[string]string // name -> labels
	bound      map[string]*corev1.Pod       // pod key -> bound pod
	withAnti   map[string]*corev1.Pod       // the bound pods with required anti-affinity
}

func newTopology(exact bool) *topology {
	return &topology{exact: exact, nodes: map[string]*corev1.Node{}, namespaces: map[string]map[string]string{}, bound: map[string]*corev1.Pod{}, withAnti: map[string]*corev1.Pod{}}
}

func requiredAffinity(p *corev1.Pod) []*corev1.PodAffinityTerm {
	return p.GetSpec().GetAffinity().GetPodAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()
}

func requiredAnti(p *corev1.Pod) []*corev1.PodAffinityTerm {
	return p.GetSpec().GetAffinity().GetPodAntiAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()
}

// putPod records the pod's stored state (after any check of its binding).
func (t *topology) putPod(key string, p *corev1.Pod) {
	if p.GetSpec().GetNodeName() == "" || p.GetStatus().GetPhase() == "Succeeded" || p.GetStatus().GetPhase() == "Failed" {
		t.deletePod(key)
		return
	}
	t.bound[key] = p
	if len(requiredAnti(p)) > 0 {
		t.withAnti[key] = p
	} else {
		delete(t.withAnti, key)
	}
}

func (t *topology) deletePod(key string) {
	delete(t.bound, key)
	delete(t.withAnti, key)
}

// checkBind checks pod p, bound to its spec.nodeName at revision rev,
// against the pods bound before it.
func (t *topology) checkBind(rep *Report, key string, p *corev1.Pod, rev int64) {
	name := podKey(p)
	node := t.nodes[p.GetSpec().GetNodeName()]
	labels := node.GetMetadata().GetLabels()
	// The pod's required anti-affinity: no pod a term selects in the
	// term's domain of the node (a node without the key: no domain).
	for _, term := range requiredAnti(p) {
		rep.AntiAffinityChecks++
		k := term.GetTopologyKey()
		v, ok := labels[k]
		if !ok {
			continue
		}
		selects := scheduler.AffinityTermSelector(p, term)
		for qk, q := range t.bound {
			if w, has := t.nodes[q.GetSpec().GetNodeName()].GetMetadata().GetLabels()[k]; qk == key || !has || w != v {
				continue
			}
			if selects(q, t.namespaces[q.GetMetadata().GetNamespace()]) {
				rep.violate("pod %s bound to %s at revision %d: its required anti-affinity (%s=%s) selects %s on %s",
					name, node.GetMetadata().GetName(), rev, term.GetTopologyKey(), v, podKey(q), q.GetSpec().GetNodeName())
			}
		}
	}
	// The existing pods' required anti-affinity (symmetry).
	for qk, q := range t.withAnti {
		if qk == key {
			continue
		}
		qLabels := t.nodes[q.GetSpec().GetNodeName()].GetMetadata().GetLabels()
		for _, term := range requiredAnti(q) {
			rep.AntiAffinityChecks++
			v, ok := qLabels[term.GetTopologyKey()]
			if w, has := labels[term.GetTopologyKey()]; !ok || !has || w != v {
				continue
			}
			if scheduler.AffinityTermSelector(q, term)(p, t.namespaces[p.GetMetadata().GetNamespace()]) {
				rep.violate("pod %s bound to %s at revision %d: the required anti-affinity of %s on %s (%s=%s) selects it",
					name, node.GetMetadata().GetName(), rev, podKey(q), q.GetSpec().GetNodeName(), term.GetTopologyKey(), v)
			}
		}
	}
	t.checkAffinity(rep, key, name, p, node, rev)
	t.checkSpread(rep, key, name, p, node, rev)
}

// inexact reports what a binding broke: a violation when the checks are
// exact, else an entry of list.
func (t *topology) inexact(rep *Report, list *[]string) func(format string, args ...any) {
	if t.exact {
		return rep.violate
	}
	return func(format string, args ...any) { *list = append(*list, fmt.Sprintf(format, args...)) }
}

// checkAffinity checks p's required pod affinity as kube-scheduler's
// satisfyPodAffinity: the node has every term's topology key, and in each
// term's domain of the node is a bound pod that every term selects — or
// no bound pod anywhere (on a node with the term's key) is selected by
// every term and p selects itself by every term (the first pod of a group
// with affinity to itself).
func (t *topology) checkAffinity(rep *Report, key, name string, p *corev1.Pod, node *corev1.Node, rev int64) {
	terms := requiredAffinity(p)
	if len(terms) == 0 {
		return
	}
	rep.AffinityChecks += len(terms)
	sels := make([]func(*corev1.Pod, map[string]string) bool, len(terms))
	for i, term := range terms {
		sels[i] = scheduler.AffinityTermSelector(p, term)
	}
	selectedByAll := func(q *corev1.Pod) bool {
		for _, sel := range sels {
			if !sel(q, t.namespaces[q.GetMetadata().GetNamespace()]) {
				return false
			}
		}
		return true
	}
	type pair struct{ key, value string }
	matched := map[pair]bool{} // the domains holding a pod every term selects
	for qk, q := range t.bound {
		if qk == key || !selectedByAll(q) {
			continue
		}
		qLabels := t.nodes[q.GetSpec().GetNodeName()].GetMetadata().GetLabels()
		for _, term := range terms {
			if v, ok := qLabels[term.GetTopologyKey()]; ok {
				matched[pair{term.GetTopologyKey(), v}] = true
			}
		}
	}
	labels := node.GetMetadata().GetLabels()
	for _, term := range terms {
		v, ok := labels[term.GetTopologyKey()]
		if !ok {
			rep.violate("pod %s bound to %s at revision %d: the node has no %s label its required affinity requires", name, node.GetMetadata().GetName(), rev, term.GetTopologyKey())
			return
		}
		if matched[pair{term.GetTopologyKey(), v}] {
			continue
		}
		if len(matched) == 0 && selectedByAll(p) {
			return // the first of a group with affinity to itself
		}
		t.inexact(rep, &rep.AffinityUnmet)("pod %s bound to %s at revision %d: its required affinity (%s=%s) selects no pod there",
			name, node.GetMetadata().GetName(), rev, term.GetTopologyKey(), v)
		return
	}
}

// checkSpread checks p's DoNotSchedule constraints: the eligible domains
// are the values of the constraint's key over the nodes that have every
// DoNotSchedule key of p and pass the constraint's inclusion policies;
// the matching pods in the node's domain, plus p if it matches, less the
// fewest in an eligible domain (0 with fewer than minDomains domains)
// must not exceed maxSkew.
func (t *topology) checkSpread(rep *Report, key, name string, p *corev1.Pod, node *corev1.Node, rev int64) {
	var cs []*corev1.TopologySpreadConstraint
	for _, c := range p.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() == "DoNotSchedule" {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return
	}
	hasKeys := func(n *corev1.Node) bool {
		for _, c := range cs {
			if _, ok := n.GetMetadata().GetLabels()[c.GetTopologyKey()]; !ok {
				return false
			}
		}
		return true
	}
	for _, c := range cs {
		rep.SpreadChecks++
		k := c.GetTopologyKey()
		v, ok := node.GetMetadata().GetLabels()[k]
		if !ok {
			rep.violate("pod %s bound to %s at revision %d: the node has no %s label its DoNotSchedule constraint requires", name, node.GetMetadata().GetName(), rev, k)
			continue
		}
		includes, selects := scheduler.SpreadNodeFilter(p, c), scheduler.SpreadSelector(p, c)
		counts := map[string]int64{}
		for _, n := range t.nodes {
			if hasKeys(n) && includes(n) {
				counts[n.GetMetadata().GetLabels()[k]] += 0
			}
		}
		for qk, q := range t.bound {
			qn := t.nodes[q.GetSpec().GetNodeName()]
			d := qn.GetMetadata().GetLabels()[k]
			if _, eligible := counts[d]; qk == key || !eligible || !hasKeys(qn) || !includes(qn) || !selects(q) {
				continue
			}
			counts[d]++
		}
		least := int64(math.MaxInt32)
		for _, n := range counts {
			least = min(least, n)
		}
		if len(counts) < int(c.GetMinDomains()) {
			least = 0
		}
		self := int64(0)
		if selects(p) {
			self = 1
		}
		if skew := counts[v] + self - least; skew > int64(c.GetMaxSkew()) {
			t.inexact(rep, &rep.SpreadSkews)("pod %s bound to %s at revision %d: DoNotSchedule spread on %s has skew %d > maxSkew %d (%s=%s holds %d matching pods, the least %d; domains %v)",
				name, node.GetMetadata().GetName(), rev, k, skew, c.GetMaxSkew(), k, v, counts[v], least, counts)
		}
	}
}

package scheduler

import (
	"slices"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// The first pod of a self-affine group across replicas (doc.go, "Rules
// over a domain wider than a node").
//
// InterPodAffinity lets a pod whose required affinity terms match no pod
// in the cluster, but match the pod itself, go to any node
// (Result.FirstOfGroup). That holds only while no such pod is bound: two
// replicas deciding at once, each on a cache without the other's first
// pod, would place two first pods in different domains, and the second
// bind would break its affinity. So a bind whose decision relied on the
// exemption compares and rewrites, in its transaction, one anchor record
// per required affinity term (affinityAnchors, a NodeAllocation without
// pods, as the guard registry), at the revision this replica knows; a
// second replica's such bind then loses on the anchor, reads it, waits
// until its pod informer has reached its revision (the first pod was
// bound at that revision) and decides again, with a matching pod: it
// joins the first pod's domain. Binds that did not use the exemption pay
// nothing here.
//
// A pod the terms select that is not a first pod (a plain one) writes no
// anchor; that case is guarded by the cluster domain instead
// (firstPodRules, domainguard.go): the first pod's bind lists its terms
// over ClusterKey, every bind of a pod they select then rewrites its
// writer's cluster record, and the first pod's bind compares the others'.
// Two first pods meet on that too; the anchor is kept beside it.

// affinityAnchorPrefix prefixes the anchor records' names (the rest is a
// hash of the term, widened).
const affinityAnchorPrefix = "~affinity-first:"

// affinityAnchors returns the names of pod's anchor records, sorted, once
// each: one per required pod affinity term, named by which pods it
// selects, widened as the guard registry widens a rule (widenedTerm) and
// without its topology key. The exemption's premise, no pod anywhere
// matches, does not depend on the key, so two first pods whose terms
// select the same pods by different keys share an anchor too; wider terms
// only make more exemption binds meet on one anchor.
func affinityAnchors(pod *corev1.Pod) []string {
	terms := pod.GetSpec().GetAffinity().GetPodAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()
	ns := pod.GetMetadata().GetNamespace()
	names := make([]string, 0, len(terms))
	for _, t := range terms {
		e := widenedTerm(t, ns)
		e.TopologyKey = ""
		hash, _ := termHash(e)
		names = append(names, affinityAnchorPrefix+hash)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// anchorFirst adds to txn, when req's decision relied on the first-pod
// exemption, a compare of each of the pod's anchor records at the
// revision this replica knows (0: still absent) and its rewrite. As a
// domain record's, the compare holds only if the decision saw the pod
// the anchor's last write bound: an anchor known at a revision the pod
// informer had not reached before the decision is stale (domainStale:
// read it, wait for the pod informer, decide again). It returns the
// anchors put (a conflict on one of them means domainStale).
func (s *Stage) anchorFirst(txn objects.Txn, req bindRequest) (objects.Txn, []*corev1.NodeAllocation, bindOutcome) {
	if !req.firstOfGroup {
		return txn, nil, bound
	}
	var anchors []*corev1.NodeAllocation
	for _, name := range affinityAnchors(req.pod) {
		informed, _ := s.allocs.Get("", name)
		_, rev := s.known.get(informed, name)
		if rev > req.decidedAt {
			*req.stale = name
			return txn, nil, domainStale
		}
		rec := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: name}}
		txn = txn.Compare(rec, rev).Put(rec)
		anchors = append(anchors, rec)
	}
	return txn, anchors, bound
}

package defaultpreemption

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
)

// DefaultPreemptionName is the DefaultPreemption plugin's name.
const DefaultPreemptionName = "DefaultPreemption"

// kube-scheduler's preemption words.
const (
	ReasonNoVictims         = "No preemption victims found for incoming pod"
	ReasonNotHelpful        = "Preemption is not helpful for scheduling"
	msgPreemptNever         = "not eligible due to preemptionPolicy=Never."
	msgTerminatingNominated = "not eligible due to a terminating pod on the nominated node."
	// PreemptNever is spec.preemptionPolicy's value that forbids a pod to
	// preempt.
	PreemptNever = "Never"
)

// kube-scheduler's DefaultPreemptionArgs defaults: the dry run looks for
// candidates until it has found max(minCandidateNodesPercentage% of the
// potential nodes, minCandidateNodesAbsolute) of them.
const (
	minCandidateNodesPercentage = 10
	minCandidateNodesAbsolute   = 100
)

// defaultPreemption is kube-scheduler's DefaultPreemption PostFilter:
// when no node fits the pod, it looks for the node where deleting the
// fewest and least important pods of lower priority makes it fit.
//
// For each node the filters rejected as Unschedulable (resolvable by
// removing pods), selectVictimsOnNode takes every pod of lower priority
// off a copy of the node, checks that the pod then passes the filters
// (with the pods nominated to the node counted), and reprieves the
// potential victims one by one, keeping each whose return still lets the
// pod fit: first those whose deletion would violate a
// PodDisruptionBudget (the snapshot's, from the store), then the others,
// each group the most important first (higher priority, then earlier
// start). Among the candidate nodes, pickOneNodeForPreemption prefers the
// fewest victims that violate a budget, then the lowest highest-priority
// victim, then the lowest sum of priorities, then the fewest victims,
// then the latest start among the highest-priority victims. As in
// kube-scheduler, budgets are best effort: a victim that violates one is
// still deleted when no other choice makes the pod fit.
//
// Not modelled: the dry run does not update PodTopologySpread's and
// InterPodAffinity's per-cycle counts for the removed pods
// (kube-scheduler's PreFilterExtensions AddPod/RemovePod), so a pod kept
// off a node only by a lower-priority pod's spread or anti-affinity is not
// helped by preemption; extenders; lower-priority nominations on the
// chosen node are not cleared (they reserve no room against the
// preemptor: a cycle counts only the nominated pods of at least its
// priority).
type defaultPreemption struct {
	rng *rand.Rand
}

var _ framework.PostFilterPlugin = (*defaultPreemption)(nil)

func New() (framework.Plugin, error) {
	return &defaultPreemption{rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}, nil
}

func (*defaultPreemption) Name() string { return DefaultPreemptionName }

// PostFilter runs kube-scheduler's Evaluator.Preempt. Its messages are
// prefixed "preemption: ", as kube-scheduler's.
func (pl *defaultPreemption) PostFilter(state *framework.CycleState, pod *corev1.Pod, h framework.Handle, statuses map[string]*framework.Status) (*framework.PostFilterResult, *framework.Status) {
	res, st := pl.preempt(state, pod, h, statuses)
	if msg := st.Message(); msg != "" {
		return res, framework.NewStatus(st.Code(), "preemption: "+msg)
	}
	return res, st
}

func (pl *defaultPreemption) preempt(state *framework.CycleState, pod *corev1.Pod, h framework.Handle, statuses map[string]*framework.Status) (*framework.PostFilterResult, *framework.Status) {
	snap := state.Snapshot()
	if ok, msg := eligibleToPreempt(pod, snap, statuses); !ok {
		return nil, framework.NewStatus(framework.Unschedulable, msg)
	}
	var potential []*framework.NodeInfo
	for _, n := range snap.NodeList {
		if statuses[n.Name()].Code() == framework.Unschedulable {
			potential = append(potential, n)
		}
	}
	// The dry run's verdicts, for the message when no node helps.
	dry := &framework.FitError{Pod: framework.PodName(pod), NumAllNodes: len(snap.NodeList), NodeReasons: make(map[string][]string, len(snap.NodeList))}
	for _, n := range snap.NodeList {
		dry.NodeReasons[n.Name()] = []string{ReasonNotHelpful}
	}
	var candidates []candidate
	if len(potential) > 0 {
		want := max(len(potential)*minCandidateNodesPercentage/100, minCandidateNodesAbsolute)
		offset := pl.rng.IntN(len(potential))
		for i := range potential {
			n := potential[(offset+i)%len(potential)]
			victims, violating, st := selectVictimsOnNode(state, pod, n, h, snap.PDBs)
			switch {
			case st.Code() == framework.Error:
				return nil, st
			case !st.IsSuccess():
				dry.NodeReasons[n.Name()] = st.Reasons()
			case len(victims) > 0: // none: it fits as it is (a nomination moved meanwhile)
				candidates = append(candidates, candidate{node: n.Name(), victims: victims, pdbViolations: violating})
			}
			if len(candidates) >= want {
				break
			}
		}
	}
	if len(candidates) == 0 {
		return nil, framework.NewStatus(framework.Unschedulable, dry.Error())
	}
	best := pickOneNodeForPreemption(candidates)
	res := &framework.PostFilterResult{NominatedNode: best.node, Victims: make([]framework.Victim, len(best.victims))}
	for i, v := range best.victims {
		e := v.Entry
		res.Victims[i] = framework.Victim{UID: e.Key, Namespace: e.Namespace, Name: e.Name, Priority: v.Priority, Terminating: v.Terminating}
	}
	return res, nil
}

// eligibleToPreempt is kube-scheduler's PodEligibleToPreemptOthers: a pod
// with preemptionPolicy Never does not preempt, nor one whose nominated
// node still has a lower-priority pod that a preemption is terminating
// (unless the filters now find that node unresolvable).
func eligibleToPreempt(pod *corev1.Pod, snap *framework.Snapshot, statuses map[string]*framework.Status) (bool, string) {
	if pod.GetSpec().GetPreemptionPolicy() == PreemptNever {
		return false, msgPreemptNever
	}
	nom := pod.GetStatus().GetNominatedNodeName()
	if nom == "" || statuses[nom].Code() == framework.UnschedulableAndUnresolvable {
		return true, ""
	}
	if n, ok := snap.Get(nom); ok {
		prio := pod.GetSpec().GetPriority()
		for _, p := range n.Pods() {
			if p.Priority < prio && p.Preempted {
				return false, msgTerminatingNominated
			}
		}
	}
	return true, ""
}

// candidate is a node where preemption makes the pod fit, its victims
// (most important first), and how many of them violate a
// PodDisruptionBudget.
type candidate struct {
	node          string
	victims       []*framework.PodMeta
	pdbViolations int
}

// moreImportant is kube-scheduler's MoreImportantPod as a sort order:
// higher priority first, then the earlier start.
func moreImportant(a, b *framework.PodMeta) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	return cmp.Compare(a.StartNano, b.StartNano)
}

// selectVictimsOnNode finds the fewest, least important pods of lower
// priority than pod whose deletion lets it pass the filters on n (a copy
// of n is modified, never n), sparing first the pods whose deletion would
// violate one of pdbs; it returns the victims, most important first, and
// how many of them violate a budget. A node with no lower-priority pods is
// UnschedulableAndUnresolvable; one where the pod does not fit even
// without them returns the filters' rejection.
func selectVictimsOnNode(state *framework.CycleState, pod *corev1.Pod, n *framework.NodeInfo, h framework.Handle, pdbs []*framework.PDB) ([]*framework.PodMeta, int, *framework.Status) {
	prio := pod.GetSpec().GetPriority()
	var potential []*framework.PodMeta
	for _, p := range n.Pods() {
		if p.Priority < prio {
			potential = append(potential, p)
		}
	}
	if len(potential) == 0 {
		return nil, 0, framework.NewStatus(framework.UnschedulableAndUnresolvable, ReasonNoVictims)
	}
	c := n.Clone()
	for _, p := range potential {
		c.RemovePod(p.Entry)
	}
	if st := h.RunFilters(state, pod, c); !st.IsSuccess() {
		return nil, 0, st
	}
	slices.SortStableFunc(potential, moreImportant)
	violating, nonViolating := filterPodsWithPDBViolation(potential, pdbs)
	var victims []*framework.PodMeta
	reprieve := func(p *framework.PodMeta) (bool, *framework.Status) {
		c.AddPod(p.Entry)
		switch st := h.RunFilters(state, pod, c); {
		case st.Code() == framework.Error:
			return false, st
		case !st.IsSuccess():
			c.RemovePod(p.Entry)
			victims = append(victims, p)
			return false, nil
		}
		return true, nil
	}
	numViolating := 0
	for _, p := range violating {
		fits, st := reprieve(p)
		if st != nil {
			return nil, 0, st
		}
		if !fits {
			numViolating++
		}
	}
	for _, p := range nonViolating {
		if _, st := reprieve(p); st != nil {
			return nil, 0, st
		}
	}
	if len(violating) != 0 && len(nonViolating) != 0 {
		slices.SortStableFunc(victims, moreImportant)
	}
	return victims, numViolating, nil
}

// filterPodsWithPDBViolation is kube-scheduler's: it splits pods (most
// important first) into those whose deletion would violate a budget and
// the others. Each budget's status.disruptionsAllowed is spent by the
// pods it guards in that order; a pod already in its disruptedPods (being
// evicted) spends nothing, and a pod that takes a budget below zero
// violates it.
func filterPodsWithPDBViolation(pods []*framework.PodMeta, pdbs []*framework.PDB) (violating, nonViolating []*framework.PodMeta) {
	allowed := make([]int32, len(pdbs))
	for i, b := range pdbs {
		allowed[i] = b.DisruptionsAllowed
	}
	for _, p := range pods {
		violated := false
		for i, b := range pdbs {
			if !b.Guards(p.Namespace, p.Labels) || b.DisruptedPods[p.Entry.Name] {
				continue
			}
			allowed[i]--
			if allowed[i] < 0 {
				violated = true
			}
		}
		if violated {
			violating = append(violating, p)
		} else {
			nonViolating = append(nonViolating, p)
		}
	}
	return violating, nonViolating
}

// pickOneNodeForPreemption is kube-scheduler's: the candidate with the
// fewest victims that violate a PodDisruptionBudget, then the one whose
// highest-priority victim is lowest, then the lowest sum of priorities
// (each shifted by 2^31 so that negative priorities count), then the
// fewest victims, then the latest earliest start among the
// highest-priority victims, then the first.
func pickOneNodeForPreemption(cands []candidate) candidate {
	scores := []func(c candidate) int64{
		func(c candidate) int64 { return -int64(c.pdbViolations) },
		func(c candidate) int64 { return -int64(c.victims[0].Priority) },
		func(c candidate) int64 {
			var sum int64
			for _, v := range c.victims {
				sum += int64(v.Priority) + math.MaxInt32 + 1
			}
			return -sum
		},
		func(c candidate) int64 { return -int64(len(c.victims)) },
		func(c candidate) int64 {
			top, earliest := c.victims[0].Priority, int64(math.MaxInt64)
			for _, v := range c.victims {
				if v.Priority == top && v.StartNano < earliest {
					earliest = v.StartNano
				}
			}
			return earliest
		},
	}
	for _, f := range scores {
		if len(cands) == 1 {
			break
		}
		best := int64(math.MinInt64)
		var kept []candidate
		for _, c := range cands {
			switch s := f(c); {
			case s > best:
				best, kept = s, append(kept[:0], c)
			case s == best:
				kept = append(kept, c)
			}
		}
		cands = kept
	}
	return cands[0]
}

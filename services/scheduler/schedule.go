package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/podflow/podflow/proto/corev1"
)

// Sampling bounds (kube-scheduler's minFeasibleNodesToFind and
// minFeasibleNodesPercentageToFind).
const (
	minFeasibleNodesToFind           = 100
	minFeasibleNodesPercentageToFind = 5
)

// Result is the outcome of a successful scheduling cycle.
type Result struct {
	// Node is the chosen node.
	Node string
	// FeasibleNodes is how many nodes passed the filters; EvaluatedNodes
	// how many were filtered (the cycle stops filtering once it has found
	// enough feasible nodes to score).
	FeasibleNodes, EvaluatedNodes int
	// FilterDuration and ScoreDuration time the two phases.
	FilterDuration, ScoreDuration time.Duration
	// Scores are the best Config.NumScoresToReport nodes, chosen first;
	// empty when a single feasible node made scoring unnecessary.
	Scores []NodeScore
}

// NodeScore is a node's score: each plugin's 0–100 score and the weighted
// total.
type NodeScore struct {
	Node                                                                             string
	Total                                                                            int64
	TaintToleration, NodeAffinity, LeastAllocated, BalancedAllocation, ImageLocality int64
}

// Scheduler picks nodes for pods from a Snapshot: it filters out the nodes
// that cannot run the pod, scores a sample of the rest and picks the best,
// breaking ties at random. It does no I/O.
//
// A Scheduler is not safe for concurrent use: it carries the rotating start
// index between cycles, the tie-break random source and scratch buffers.
// Run it from one goroutine (one per replica or profile).
type Scheduler struct {
	cfg  Config
	rng  *rand.Rand
	next int // nextStartNodeIndex

	// scratch, reused across cycles
	feasible []*NodeInfo
	failed   []failure
	scores   []NodeScore
	na, tt   []int64
}

type failure struct {
	node *NodeInfo
	v    verdict
	t    *taint
}

// New returns a Scheduler; cfg must be valid.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Scheduler{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, nil
}

// numFeasibleNodesToFind is kube-scheduler's: every node in clusters under
// 100 nodes; otherwise percentage of them (adaptive when 0: 50 - n/125,
// at least 5%), but at least 100.
func numFeasibleNodesToFind(percentage int32, numAllNodes int) int {
	if numAllNodes < minFeasibleNodesToFind {
		return numAllNodes
	}
	if percentage == 0 {
		percentage = int32(50 - numAllNodes/125)
		if percentage < minFeasibleNodesPercentageToFind {
			percentage = minFeasibleNodesPercentageToFind
		}
	}
	n := numAllNodes * int(percentage) / 100
	if n < minFeasibleNodesToFind {
		return minFeasibleNodesToFind
	}
	return n
}

// Schedule picks a node for pod. It returns a *FitError (matching
// ErrUnschedulable) when no node passes the filters, ErrNoNodesAvailable
// when the snapshot is empty and ErrInvalidObject when the pod cannot be
// interpreted. The snapshot is only read.
func (s *Scheduler) Schedule(pod *corev1.Pod, snap *Snapshot) (Result, error) {
	start := time.Now()
	all := snap.nodes
	if len(all) == 0 {
		return Result{}, ErrNoNodesAvailable
	}
	p, err := newPodState(pod, snap)
	if err != nil {
		return Result{}, err
	}

	// Filter, from where the last cycle stopped, until enough feasible
	// nodes are found.
	want := numFeasibleNodesToFind(s.cfg.PercentageOfNodesToScore, len(all))
	feasible, failed := s.feasible[:0], s.failed[:0]
	i, j := 0, s.next%len(all)
	for ; i < len(all) && len(feasible) < want; i++ {
		n := all[j]
		if j++; j == len(all) {
			j = 0
		}
		if v, t := p.filter(n); v == 0 {
			feasible = append(feasible, n)
		} else {
			failed = append(failed, failure{n, v, t})
		}
	}
	s.next = j
	s.feasible, s.failed = feasible, failed
	filtered := time.Now()

	res := Result{FeasibleNodes: len(feasible), EvaluatedNodes: i, FilterDuration: filtered.Sub(start)}
	switch len(feasible) {
	case 0:
		fe := &FitError{Pod: p.name, NumAllNodes: len(all), NodeReasons: make(map[string][]string, len(failed))}
		// Nodes rejected for the same reasons share one slice.
		type key struct {
			v     verdict
			taint string
		}
		memo := map[key][]string{}
		for _, f := range failed {
			k := key{v: f.v}
			if f.t != nil {
				k.taint = f.t.reason
			}
			r, ok := memo[k]
			if !ok {
				r = f.v.reasons(f.t)
				memo[k] = r
			}
			fe.NodeReasons[f.node.name] = r
		}
		return Result{}, fe
	case 1:
		res.Node = feasible[0].name
		return res, nil
	}
	best := s.score(p, feasible)
	res.Node = s.scores[best].Node
	res.Scores = s.report(best)
	res.ScoreDuration = time.Since(filtered)
	return res, nil
}

// score fills s.scores for the feasible nodes and returns the index of the
// chosen one: the highest total, ties broken uniformly at random by
// reservoir sampling.
func (s *Scheduler) score(p *podState, feasible []*NodeInfo) int {
	w := s.cfg.Weights
	scores := slices.Grow(s.scores[:0], len(feasible))[:len(feasible)]
	na := slices.Grow(s.na[:0], len(feasible))[:len(feasible)]
	tt := slices.Grow(s.tt[:0], len(feasible))[:len(feasible)]
	var maxNA, maxTT int64
	balanced := w.BalancedAllocation != 0 && !p.bestEffort()
	affinity := w.NodeAffinity != 0 && len(p.preferred) > 0
	for i, n := range feasible {
		ns := &scores[i]
		*ns = NodeScore{Node: n.name}
		if w.LeastAllocated != 0 {
			ns.LeastAllocated = p.leastAllocated(n)
		}
		if balanced {
			ns.BalancedAllocation = p.balancedAllocation(n)
		}
		if w.ImageLocality != 0 && len(p.images) > 0 {
			ns.ImageLocality = p.imageLocality(n)
		}
		var a, t int64
		if affinity {
			a = p.nodeAffinity(n)
			maxNA = max(maxNA, a)
		}
		if w.TaintToleration != 0 && n.preferTaints != 0 {
			t = p.intolerablePreferNoSchedule(n)
			maxTT = max(maxTT, t)
		}
		na[i], tt[i] = a, t
	}
	normalize(na, maxNA, false)
	if w.TaintToleration != 0 {
		normalize(tt, maxTT, true)
	}
	best, ties := 0, 0
	for i := range scores {
		ns := &scores[i]
		ns.NodeAffinity, ns.TaintToleration = na[i], tt[i]
		ns.Total = ns.TaintToleration*w.TaintToleration + ns.NodeAffinity*w.NodeAffinity +
			ns.LeastAllocated*w.LeastAllocated + ns.BalancedAllocation*w.BalancedAllocation +
			ns.ImageLocality*w.ImageLocality
		switch {
		case i == 0 || ns.Total > scores[best].Total:
			best, ties = i, 1
		case ns.Total == scores[best].Total:
			ties++
			if s.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	s.scores, s.na, s.tt = scores, na, tt
	return best
}

// report returns the chosen node's score and the next best, up to
// NumScoresToReport.
func (s *Scheduler) report(best int) []NodeScore {
	k := min(s.cfg.NumScoresToReport, len(s.scores))
	if k == 0 {
		return nil
	}
	out := make([]NodeScore, 1, k)
	out[0] = s.scores[best]
	if k == 1 {
		return out
	}
	for i := range s.scores {
		if i == best {
			continue
		}
		ns := s.scores[i]
		if len(out) < k {
			out = append(out, ns)
		} else if ns.Total > out[k-1].Total {
			out[k-1] = ns
		} else {
			continue
		}
		for j := len(out) - 1; j > 1 && out[j].Total > out[j-1].Total; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// String renders a score for traces.
func (ns NodeScore) String() string {
	return fmt.Sprintf("%s=%d (TaintToleration %d, NodeAffinity %d, LeastAllocated %d, BalancedAllocation %d, ImageLocality %d)",
		ns.Node, ns.Total, ns.TaintToleration, ns.NodeAffinity, ns.LeastAllocated, ns.BalancedAllocation, ns.ImageLocality)
}

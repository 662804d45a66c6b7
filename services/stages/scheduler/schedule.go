package scheduler

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/interpodaffinity"

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
	// FirstOfGroup: the node passed InterPodAffinity only by its
	// exemption for the first pod of a self-affine group (no pod in the
	// snapshot matches the pod's required affinity terms, and the pod
	// matches them itself), which holds only while no such pod is bound:
	// a caller running several schedulers must guard the bind (the
	// stage's anchor records, affinityanchor.go).
	FirstOfGroup bool
}

// Scheduler picks nodes for pods from a Snapshot by running its profile's
// plugins (see framework.go): PreFilter, then Filter on the nodes until
// enough feasible ones are found, then PreScore, Score and NormalizeScore
// on those; it picks the best weighted total, breaking ties at random. It
// does no I/O.
//
// A Scheduler is not safe for concurrent use: it carries the rotating start
// index between cycles, the tie-break random source, its plugins, the
// CycleState and scratch buffers. Run it from one goroutine (one per
// replica or profile).
type Scheduler struct {
	cfg  Config
	fw   *frameworkImpl
	rng  *rand.Rand
	next int // nextStartNodeIndex

	// scratch, reused across cycles
	state    framework.CycleState
	filters  []filterEntry       // this cycle's (PreFilter did not skip)
	verdicts []*framework.Status // by node of a filter chunk: nil, or its rejection
	single   []*framework.Status // RunFilters' verdict
	scorers  []scoreEntry        // this cycle's (PreScore did not skip)
	columns  [][]int64           // scores by scorer, then feasible node
	feasible []*framework.NodeInfo
	failed   []failure
	reported []int // indexes in feasible of the scores to report

	// Plugin timing (pluginmetrics.go): pm observes, on the share
	// samplePercent of cycles, rec (this cycle's: nil when unsampled)
	// each plugin's time; took and worst are per filter (then per
	// scorer) scratch: the time summed over its batch calls and the most
	// severe code it gave; before is a chunk's verdicts before a filter.
	pm            *pluginRecorder
	samplePercent int
	rec           *pluginRecorder
	took          []time.Duration
	worst         []framework.Code
	before        []*framework.Status
}

type failure struct {
	node   *framework.NodeInfo
	status *framework.Status
}

// New returns a Scheduler; cfg must be valid.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	fw, err := newFramework(cfg)
	if err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Scheduler{
		cfg: cfg, fw: fw, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		verdicts: make([]*framework.Status, filterChunk), single: make([]*framework.Status, 1),
		samplePercent: pluginMetricsSamplePercent,
	}, nil
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
// interpreted (or another plugin's error). The snapshot is only read.
func (s *Scheduler) Schedule(pod *corev1.Pod, snap *framework.Snapshot) (Result, error) {
	start := time.Now()
	all := snap.NodeList
	if len(all) == 0 {
		return Result{}, framework.ErrNoNodesAvailable
	}
	s.state.Reset(snap)
	s.scorers = s.scorers[:0]
	s.rec = s.sample()
	filters, st := s.fw.runPreFilter(&s.state, pod, s.filters, s.rec)
	s.filters = filters
	if st != nil {
		if !st.IsRejected() {
			return Result{}, st.AsError()
		}
		// A PreFilter rejection rejects every node, as kube-scheduler's.
		fe := &framework.FitError{Pod: framework.PodName(pod), NumAllNodes: len(all), PreFilterMsg: st.Message(), NodeReasons: make(map[string][]string, len(all))}
		statuses := make(map[string]*framework.Status, len(all))
		for _, n := range all {
			fe.NodeReasons[n.Name()] = st.Reasons()
			statuses[n.Name()] = st
		}
		return Result{}, s.postFilter(pod, fe, statuses)
	}

	// A pod nominated by its preemption goes to its nominated node when
	// that fits now (kube-scheduler's evaluateNominatedNode): the room was
	// made for it.
	if nom := pod.GetStatus().GetNominatedNodeName(); nom != "" {
		if n, ok := snap.Get(nom); ok && s.RunFilters(&s.state, pod, n) == nil {
			return Result{Node: nom, FeasibleNodes: 1, EvaluatedNodes: 1, FilterDuration: time.Since(start), FirstOfGroup: s.firstOfGroup()}, nil
		}
	}

	// Filter, from where the last cycle stopped, until enough feasible
	// nodes are found.
	want := numFeasibleNodesToFind(s.cfg.PercentageOfNodesToScore, len(all))
	i, err := s.filter(pod, all, want)
	if err != nil {
		return Result{}, err
	}
	feasible, failed := s.feasible, s.failed
	filtered := time.Now()

	res := Result{FeasibleNodes: len(feasible), EvaluatedNodes: i, FilterDuration: filtered.Sub(start), FirstOfGroup: s.firstOfGroup()}
	switch len(feasible) {
	case 0:
		fe := &framework.FitError{Pod: framework.PodName(pod), NumAllNodes: len(all), NodeReasons: make(map[string][]string, len(failed))}
		statuses := make(map[string]*framework.Status, len(failed))
		for _, f := range failed {
			fe.NodeReasons[f.node.Name()] = f.status.Reasons()
			statuses[f.node.Name()] = f.status
		}
		return Result{}, s.postFilter(pod, fe, statuses)
	case 1:
		res.Node = feasible[0].Name()
		return res, nil
	}
	best, err := s.score(pod, feasible)
	if err != nil {
		return Result{}, err
	}
	res.Node = feasible[best].Name()
	res.Scores = s.report(best)
	res.ScoreDuration = time.Since(filtered)
	return res, nil
}

// firstOfGroup reports whether this cycle's InterPodAffinity passed nodes
// by the first-pod exemption (Result.FirstOfGroup).
func (s *Scheduler) firstOfGroup() bool {
	st, _ := s.state.Read(interpodaffinity.FilterKey).(*interpodaffinity.FilterState)
	return st.FirstOfGroup()
}

// filterChunk and scoreChunk are how many nodes a cycle hands each filter
// or score plugin at once, as measured on the 5,000-node benchmarks: a
// filter chunk as large as the feasible nodes a cycle wants (the first
// filter then has every node's cache misses in flight at once), score
// chunks small enough that their NodeInfos stay in the cache from one
// score plugin to the next.
const (
	filterChunk = 512
	scoreChunk  = 64
)

// filter runs the cycle's filters over all from s.next, until want
// feasible nodes are found or every node has been evaluated, into
// s.feasible and s.failed in node order; it returns how many nodes it
// evaluated and moves s.next past them. The nodes go to the filters in
// chunks, each filter checking the nodes the filters before it passed; a
// chunk is never larger than the number of feasible nodes still wanted,
// so a cycle evaluates exactly the nodes it would one by one.
func (s *Scheduler) filter(pod *corev1.Pod, all []*framework.NodeInfo, want int) (int, error) {
	feasible, failed := s.feasible[:0], s.failed[:0]
	verdicts := s.verdicts[:filterChunk]
	if s.rec != nil {
		s.resetTimes(len(s.filters))
	}
	i, j := 0, s.next%len(all)
	for i < len(all) && len(feasible) < want {
		// A contiguous run of nodes, wrapping at the end of all.
		chunk := all[j : j+min(filterChunk, want-len(feasible), len(all)-i, len(all)-j)]
		v := verdicts[:len(chunk)]
		clear(v)
		if s.rec != nil {
			s.filterTimed(pod, chunk, v)
		} else {
			for _, f := range s.filters {
				f.batch.FilterNodes(&s.state, pod, chunk, v)
			}
		}
		if len(s.state.Snapshot().Nominated) > 0 {
			for k, st := range v {
				if st == nil {
					v[k] = s.filterNominated(pod, chunk[k])
				}
			}
		}
		for k, st := range v {
			switch {
			case st == nil:
				feasible = append(feasible, chunk[k])
			case st.Code() == framework.Error:
				i, j = i+k+1, (j+k+1)%len(all)
				s.next, s.feasible, s.failed = j, feasible, failed
				s.observeFilters()
				return i, st.AsError()
			default:
				failed = append(failed, failure{chunk[k], st})
			}
		}
		i, j = i+len(chunk), j+len(chunk)
		if j == len(all) {
			j = 0
		}
	}
	s.next, s.feasible, s.failed = j, feasible, failed
	s.observeFilters()
	return i, nil
}

// observeFilters records the filters' summed times of a sampled cycle.
func (s *Scheduler) observeFilters() {
	if s.rec != nil {
		for k, f := range s.filters {
			s.rec.observe(f.pl.Name(), pointFilter, s.worst[k], s.took[k])
		}
	}
}

// resetTimes clears s.took and s.worst for n plugins.
func (s *Scheduler) resetTimes(n int) {
	s.took = slices.Grow(s.took[:0], n)[:n]
	s.worst = slices.Grow(s.worst[:0], n)[:n]
	clear(s.took)
	clear(s.worst)
}

// filterTimed is the filters' pass over a chunk on a sampled cycle: each
// filter's time into s.took and the most severe code it gave a node of
// the chunk into s.worst (which filter resets).
func (s *Scheduler) filterTimed(pod *corev1.Pod, chunk []*framework.NodeInfo, v []*framework.Status) {
	before := append(s.before[:0], v...)
	s.before = before
	for k, f := range s.filters {
		t0 := time.Now()
		f.batch.FilterNodes(&s.state, pod, chunk, v)
		s.took[k] += time.Since(t0)
		for i, st := range v {
			if before[i] == nil && st != nil {
				if severity(st.Code()) > severity(s.worst[k]) {
					s.worst[k] = st.Code()
				}
				before[i] = st
			}
		}
	}
}

// runFilters runs the cycle's filters on one node.
func (s *Scheduler) runFilters(pod *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	v := s.single
	v[0] = nil
	nodes := [1]*framework.NodeInfo{n}
	for _, f := range s.filters {
		f.batch.FilterNodes(&s.state, pod, nodes[:], v)
	}
	return v[0]
}

// filterNominated runs the cycle's filters on a copy of n with the pods
// nominated to it that have at least pod's priority (other than pod)
// counted, as kube-scheduler's RunFilterPluginsWithNominatedPods; nil
// when there are none or the pod still passes.
func (s *Scheduler) filterNominated(pod *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	noms := s.state.Snapshot().Nominated[n.Name()]
	if len(noms) == 0 {
		return nil
	}
	key, prio := framework.PodKey(pod), pod.GetSpec().GetPriority()
	var c *framework.NodeInfo
	for _, p := range noms {
		if p.Key == key || p.Meta.Priority < prio {
			continue
		}
		if c == nil {
			c = n.Clone()
		}
		c.AddPod(p)
	}
	if c == nil {
		return nil
	}
	return s.runFilters(pod, c)
}

// RunFilters implements Handle.
func (s *Scheduler) RunFilters(state *framework.CycleState, pod *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	if st := s.runFilters(pod, n); st != nil {
		return st
	}
	return s.filterNominated(pod, n)
}

// postFilter runs the PostFilter plugins after no node passed the
// filters, until one succeeds: its result becomes fe.Nomination, else the
// last rejection's message fe.PostFilterMsg. It returns fe, or an Error
// status's error.
func (s *Scheduler) postFilter(pod *corev1.Pod, fe *framework.FitError, statuses map[string]*framework.Status) error {
	for _, pl := range s.fw.postFilter {
		t0 := s.rec.now()
		res, st := pl.PostFilter(&s.state, pod, s, statuses)
		if s.rec != nil {
			s.rec.observe(pl.Name(), pointPostFilter, st.Code(), time.Since(t0))
		}
		switch {
		case st.Code() == framework.Error:
			return st.AsError()
		case st.IsSuccess() && res != nil:
			fe.Nomination, fe.PostFilterMsg = res, ""
			return fe
		default:
			fe.PostFilterMsg = st.Message()
		}
	}
	return fe
}

// score runs the score plugins over the feasible nodes, fills s.columns
// (each scorer's scores, then the weighted totals) and returns the index
// of the chosen node: the highest total, ties broken uniformly at random
// by reservoir sampling.
func (s *Scheduler) score(pod *corev1.Pod, feasible []*framework.NodeInfo) (int, error) {
	scorers, err := s.fw.runPreScore(&s.state, pod, feasible, s.scorers, s.rec)
	s.scorers = scorers
	if err != nil {
		return 0, err
	}
	if s.rec != nil {
		s.resetTimes(len(scorers))
	}
	for len(s.columns) < len(scorers)+1 {
		s.columns = append(s.columns, nil)
	}
	totals := slices.Grow(s.columns[len(scorers)][:0], len(feasible))[:len(feasible)]
	clear(totals)
	s.columns[len(scorers)] = totals
	for k := range scorers {
		s.columns[k] = slices.Grow(s.columns[k][:0], len(feasible))[:len(feasible)]
	}
	// Chunk by chunk, every scorer, so that a chunk's nodes are still in
	// the cache for the next scorer.
	for lo := 0; lo < len(feasible); lo += scoreChunk {
		hi := min(lo+scoreChunk, len(feasible))
		chunk := feasible[lo:hi]
		for k, e := range scorers {
			col := s.columns[k][lo:hi]
			t0 := s.rec.now()
			if e.batch != nil {
				e.batch.ScoreNodes(&s.state, pod, chunk, col)
			} else {
				for i, n := range chunk {
					col[i] = e.pl.Score(&s.state, pod, n)
				}
			}
			if s.rec != nil {
				s.took[k] += time.Since(t0)
			}
		}
	}
	for k, e := range scorers {
		col := s.columns[k]
		if s.rec != nil {
			s.rec.observe(e.name, pointScore, framework.Success, s.took[k])
		}
		if e.ext != nil {
			t0 := s.rec.now()
			st := e.ext.NormalizeScore(&s.state, pod, col)
			if s.rec != nil {
				s.rec.observe(e.name, pointNormalizeScore, st.Code(), time.Since(t0))
			}
			if !st.IsSuccess() {
				return 0, st.AsError()
			}
		}
		w := e.weight
		for i, v := range col {
			totals[i] += v * w
		}
	}
	best, ties := 0, 0
	for i, t := range totals {
		switch {
		case i == 0 || t > totals[best]:
			best, ties = i, 1
		case t == totals[best]:
			ties++
			if s.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best, nil
}

// report returns the chosen node's score and the next best, up to
// NumScoresToReport, with each plugin's score.
func (s *Scheduler) report(best int) []NodeScore {
	feasible, totals := s.feasible, s.columns[len(s.scorers)]
	k := min(s.cfg.NumScoresToReport, len(feasible))
	if k == 0 {
		return nil
	}
	idx := append(s.reported[:0], best)
	total := func(j int) int64 { return totals[idx[j]] }
	for i, t := range totals {
		if i == best {
			continue
		}
		if len(idx) < k {
			idx = append(idx, i)
		} else if t > total(k-1) {
			idx[k-1] = i
		} else {
			continue
		}
		for j := len(idx) - 1; j > 1 && total(j) > total(j-1); j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	s.reported = idx
	out := make([]NodeScore, len(idx))
	plugins := make([]PluginScore, len(idx)*len(s.scorers))
	for j, i := range idx {
		ns := &out[j]
		*ns = NodeScore{Node: feasible[i].Name(), Total: totals[i]}
		if len(s.scorers) == 0 {
			continue
		}
		ns.Plugins = plugins[j*len(s.scorers) : (j+1)*len(s.scorers) : (j+1)*len(s.scorers)]
		for k, e := range s.scorers {
			v := s.columns[k][i]
			ns.Plugins[k] = PluginScore{Name: e.name, Score: v}
			if f := ns.field(e.name); f != nil {
				*f = v
			}
		}
	}
	return out
}

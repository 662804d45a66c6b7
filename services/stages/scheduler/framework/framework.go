package framework

import (
	"strings"

	"github.com/podflow/podflow/proto/corev1"
)

// The scheduling framework, in kube-scheduler's shape
// (pkg/scheduler/framework/interface.go): a plugin implements only the
// extension points it needs, and a cycle calls them in order —
//
//	PreFilter (once per cycle)  → Filter (per node, until one rejects)
//	PreScore  (once per cycle)  → Score (per feasible node) → NormalizeScore
//
// over a CycleState that the Pre* points fill with what they computed
// from the pod, so that the per-node points do no parsing.
//
// Concurrency contract: a plugin instance belongs to one Scheduler and is
// called from the goroutine that runs its cycles, one cycle at a time; it
// must keep nothing between cycles (per-cycle data lives in the
// CycleState). Filter and Score must not modify the pod, the NodeInfo or
// the Snapshot, and must not allocate on the path that passes a node (a
// cycle calls them for hundreds of nodes).

// Plugin is the parent of every extension point.
type Plugin interface {
	// Name is the plugin's name in profiles, statuses and traces.
	Name() string
}

// PreFilterPlugin runs once at the start of a cycle, before any Filter. It
// precomputes the plugin's view of the pod into the CycleState. A Skip
// status skips the plugin's Filter for this cycle (the pod has nothing
// this plugin checks); an Unschedulable status rejects every node at once;
// an Error status fails the cycle.
type PreFilterPlugin interface {
	Plugin
	PreFilter(state *CycleState, pod *corev1.Pod) *Status
}

// FilterPlugin decides whether a node can run the pod: nil (success), or a
// status with code Unschedulable or UnschedulableAndUnresolvable whose
// reasons are counted in the FailedScheduling message. The first filter
// that rejects a node decides its reasons.
type FilterPlugin interface {
	Plugin
	Filter(state *CycleState, pod *corev1.Pod, node *NodeInfo) *Status
}

// BatchFilter is an optional extension of a FilterPlugin: it filters a
// chunk of nodes (up to 512; every filter runs on a chunk before the next
// chunk) in one call, reading its CycleState and the pod once instead of
// once per node (a cycle filters hundreds of nodes, and a call and a state
// lookup per node and plugin cost as much as a cheap filter's check; keep
// the common case in the loop, without a call per node). The framework
// prefers it to Filter.
//
// statuses[i] is nodes[i]'s verdict so far: nil while every filter before
// this one passed it, else the earlier filter's rejection. FilterNodes
// checks only the nodes whose status is nil and sets each one's status to
// what Filter gives it (leaving nil for a node that passes); it leaves the
// other statuses alone. Chunks are cut so that a cycle evaluates exactly
// the nodes it would calling Filter node by node, so EvaluatedNodes and
// the FailedScheduling reasons do not depend on whether a plugin batches.
// nodes is read-only.
type BatchFilter interface {
	FilterNodes(state *CycleState, pod *corev1.Pod, nodes []*NodeInfo, statuses []*Status)
}

// PreScorePlugin runs once per cycle before Score, with the feasible
// nodes. A Skip status skips the plugin's Score (and NormalizeScore) for
// this cycle: every node scores 0 for it.
type PreScorePlugin interface {
	Plugin
	PreScore(state *CycleState, pod *corev1.Pod, feasible []*NodeInfo) *Status
}

// ScorePlugin ranks a feasible node. Without ScoreExtensions the score
// must be within 0–MaxNodeScore; with them, NormalizeScore brings the raw
// scores there. The framework multiplies by the plugin's weight.
type ScorePlugin interface {
	Plugin
	Score(state *CycleState, pod *corev1.Pod, node *NodeInfo) int64
	// ScoreExtensions returns the NormalizeScore extension, or nil.
	ScoreExtensions() ScoreExtensions
}

// BatchScorer is an optional extension of a ScorePlugin: it scores a
// chunk of the feasible nodes (up to 64) in one call, reading its
// CycleState once instead of once per node (a cycle scores hundreds of
// nodes, and a call per node and plugin is most of the cost of a cheap
// score). The framework prefers it to Score; scores[i] must be what Score
// gives nodes[i]. A cycle calls it once per chunk, the chunks in order,
// every score plugin on a chunk before the next chunk (so that the chunk's
// nodes are still in the CPU cache), then NormalizeScore on all of them.
type BatchScorer interface {
	ScoreNodes(state *CycleState, pod *corev1.Pod, nodes []*NodeInfo, scores []int64)
}

// PostFilterPlugin runs when no node passed the filters (kube-scheduler's
// PostFilter; DefaultPreemption is the in-tree one). statuses holds every
// node's rejection (read-only). A Success status with a result nominates
// the pod to the result's node once its victims are gone; a rejection's
// message is added to the FailedScheduling message; an Error fails the
// cycle. The plugins run in profile order until one succeeds.
type PostFilterPlugin interface {
	Plugin
	PostFilter(state *CycleState, pod *corev1.Pod, h Handle, statuses map[string]*Status) (*PostFilterResult, *Status)
}

// Handle is what a PostFilter plugin may run of the framework that
// called it.
type Handle interface {
	// RunFilters runs this cycle's filters (those whose PreFilter did not
	// skip) on node, which may be a modified copy of a snapshot node
	// (NodeInfo.clone), then again with the pods nominated to the node
	// that have at least pod's priority counted on it, as kube-scheduler's
	// RunFilterPluginsWithNominatedPods.
	RunFilters(state *CycleState, pod *corev1.Pod, node *NodeInfo) *Status
}

// ScoreExtensions normalizes a score plugin's raw scores, one per feasible
// node in the order Score saw them, in place to 0–MaxNodeScore.
type ScoreExtensions interface {
	NormalizeScore(state *CycleState, pod *corev1.Pod, scores []int64) *Status
}

// Code is a status code, as kube-scheduler's framework.Code.
type Code int

// Status codes.
const (
	// Success: the node passes, or the step succeeded. A nil *Status is
	// Success.
	Success Code = iota
	// Error: an internal error; the cycle fails with it.
	Error
	// Unschedulable: the node cannot run the pod now (resources, ports);
	// another pod going away may change that.
	Unschedulable
	// UnschedulableAndUnresolvable: the node cannot run the pod whatever
	// other pods do (taints, affinity, node name).
	UnschedulableAndUnresolvable
	// Skip: from PreFilter or PreScore, the plugin has nothing to do this
	// cycle.
	Skip
)

// String returns the code's name, kube-scheduler's.
func (c Code) String() string {
	switch c {
	case Success:
		return "Success"
	case Error:
		return "Error"
	case Unschedulable:
		return "Unschedulable"
	case UnschedulableAndUnresolvable:
		return "UnschedulableAndUnresolvable"
	case Skip:
		return "Skip"
	}
	return "Unknown"
}

// Status is the outcome of a plugin call. A nil *Status is Success. A
// Status is immutable once returned, so plugins may return shared
// statuses (a filter's rejection is usually one of a few fixed ones, built
// once, so that rejecting a node allocates nothing).
type Status struct {
	code    Code
	reasons []string
	err     error
}

// NewStatus returns a status with the code and reasons (in Kubernetes'
// words: they are what FailedScheduling counts).
func NewStatus(code Code, reasons ...string) *Status {
	return &Status{code: code, reasons: reasons}
}

// AsStatus wraps an error in an Error status; nil gives nil.
func AsStatus(err error) *Status {
	if err == nil {
		return nil
	}
	return &Status{code: Error, reasons: []string{err.Error()}, err: err}
}

// skipStatus is the one Skip status.
var skipStatus = NewStatus(Skip)

// SkipStatus returns the Skip status.
func SkipStatus() *Status { return skipStatus }

// Code returns the status code; Success for nil.
func (s *Status) Code() Code {
	if s == nil {
		return Success
	}
	return s.code
}

// IsSuccess reports whether the status is Success.
func (s *Status) IsSuccess() bool { return s.Code() == Success }

// IsSkip reports whether the status is Skip.
func (s *Status) IsSkip() bool { return s.Code() == Skip }

// IsRejected reports whether the status rejects the pod or node
// (Unschedulable or UnschedulableAndUnresolvable).
func (s *Status) IsRejected() bool {
	c := s.Code()
	return c == Unschedulable || c == UnschedulableAndUnresolvable
}

// Reasons returns the status's reasons; read-only (statuses are shared).
func (s *Status) Reasons() []string {
	if s == nil {
		return nil
	}
	return s.reasons
}

// Message joins the reasons with ", ".
func (s *Status) Message() string { return strings.Join(s.Reasons(), ", ") }

// AsError returns the status's error: the wrapped error of an Error
// status, nil for Success and Skip, else an error of its message.
func (s *Status) AsError() error {
	switch {
	case s.IsSuccess() || s.IsSkip():
		return nil
	case s.err != nil:
		return s.err
	}
	return statusError{s}
}

type statusError struct{ s *Status }

func (e statusError) Error() string { return e.s.Message() }

// StateKey names a piece of per-cycle data in a CycleState. Keys are small
// integers handed out by NewStateKey, so that a per-node lookup is an
// index, not a map access.
type StateKey int

var stateKeyNames []string

// NewStateKey returns a new key for name (for messages only). Call it from
// package-level variable declarations: it is not safe for concurrent use.
func NewStateKey(name string) StateKey {
	stateKeyNames = append(stateKeyNames, name)
	return StateKey(len(stateKeyNames) - 1)
}

// StateData is a piece of per-cycle data a plugin keeps in a CycleState.
type StateData any

// CycleState holds what one scheduling cycle has computed about the pod:
// PreFilter and PreScore write it, Filter and Score read it. It lives for
// one cycle; the Scheduler resets and reuses it. Like the Scheduler it is
// not safe for concurrent use.
type CycleState struct {
	snap *Snapshot
	data []StateData
}

// reset prepares the state for a cycle over snap.
func (c *CycleState) Reset(snap *Snapshot) {
	clear(c.data)
	c.snap = snap
}

// Snapshot returns the snapshot the cycle runs over (for PreFilter and
// PreScore that need cluster-wide counts, as ImageLocality does).
func (c *CycleState) Snapshot() *Snapshot { return c.snap }

// Write stores data under key.
func (c *CycleState) Write(key StateKey, data StateData) {
	if int(key) >= len(c.data) {
		c.data = append(c.data, make([]StateData, int(key)+1-len(c.data))...)
	}
	c.data[key] = data
}

// Read returns the data stored under key, or nil.
func (c *CycleState) Read(key StateKey) StateData {
	if int(key) < len(c.data) {
		return c.data[key]
	}
	return nil
}

// ReadState returns the data under key as a T, computing and storing it
// with compute when absent (so that plugins sharing a computation, such as
// the pod's requests, do it once per cycle).
func ReadState[T any](c *CycleState, key StateKey, compute func() (T, error)) (T, error) {
	if v, ok := c.Read(key).(T); ok {
		return v, nil
	}
	v, err := compute()
	if err != nil {
		return v, err
	}
	c.Write(key, v)
	return v, nil
}

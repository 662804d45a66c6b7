package scheduler

import (
	"sync"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/services/objects"
)

// lastBinds remembers, per node, the allocation record this replica's
// last bind to it wrote (by its revision, which names one stored value
// of the node's key) and what that bind knew of it: its bytes, and
// whether the bind's decision saw every pod it accounts for. At
// saturation the next bind to the node starts from that record, so it
// needs neither to encode the whole record again nor to look up every
// accounted pod among the pods its decision saw. Each fact is about
// things that do not change (a stored revision, the cache's count of
// departures from the node), so a fact stays true: a bind that does not
// start from the remembered record only finds that it does not apply.
type lastBinds struct {
	mu    sync.Mutex
	nodes map[string]lastBind
}

// lastBind is what a bind knew of the record it wrote.
type lastBind struct {
	rev   int64  // the commit's revision: the record written
	value []byte // the record's bytes as stored
	// covered: every pod the record accounts for was in the decision's
	// view of the node (view), or is the pod the bind accounted for,
	// assumed in the cache right after that view was taken.
	covered bool
	view    nodeView
	// sums are the record's sums (cache.AllocationSums) on node, the
	// node object the bind checked the fit on; nil when not known.
	node *corev1.Node
	sums *framework.NodeInfo
}

// nodeView identifies a decision's view of a node's pods by the cache's
// counts (NodeInfo.Departed and Generation).
type nodeView struct {
	departed, generation int64
}

func (l *lastBinds) get(node string) lastBind {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nodes[node]
}

func (l *lastBinds) set(node string, b lastBind) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nodes == nil {
		l.nodes = map[string]lastBind{}
	}
	l.nodes[node] = b
}

// forget drops what is remembered of node (the node is gone).
func (l *lastBinds) forget(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.nodes, node)
}

// is reports whether alloc, as stored, is the record b wrote.
func (b lastBind) is(alloc *corev1.NodeAllocation) bool {
	return b.rev > 0 && alloc != nil && objects.Revision(alloc) == b.rev
}

// covers reports whether every pod alloc accounts for is in a decision's
// view of the node, from what b established: alloc is b's record, no pod
// left the node since b's view (the same Departed), and the view was
// taken after b's (a higher Generation: after b's pod was assumed, as a
// view is taken under the cycle lock that the assumption was made under),
// so it holds every pod b's view did and the pod b bound. False says only
// that b does not tell.
func (b lastBind) covers(alloc *corev1.NodeAllocation, v nodeView) bool {
	return b.covered && b.is(alloc) && v.departed == b.view.departed && v.generation > b.view.generation
}

// sumsOf returns the sums of alloc on node when b knows them: alloc is
// b's record and node the very object b's sums were taken on (an update
// of the node is a new object). Nil otherwise.
func (b lastBind) sumsOf(alloc *corev1.NodeAllocation, node *corev1.Node) *framework.NodeInfo {
	if b.sums == nil || b.node != node || !b.is(alloc) {
		return nil
	}
	return b.sums
}

// grownValue returns the encoding of next, the record b wrote (alloc,
// unchanged) with the pod keyed key added and nothing else changed, from
// b's bytes: a map field's entries may come in any order, so the new
// entry is appended to them. It is nil when b does not know alloc's
// bytes.
func (b lastBind) grownValue(alloc, next *corev1.NodeAllocation, key string) ([]byte, error) {
	if !b.is(alloc) || b.value == nil {
		return nil, nil
	}
	entry, err := vt.Marshal(&corev1.NodeAllocation{Pods: map[string]*corev1.AllocatedPod{key: next.GetPods()[key]}})
	if err != nil {
		return nil, err
	}
	// A copy: b.value is stored, and may be held by a write in flight.
	return append(b.value[:len(b.value):len(b.value)], entry...), nil
}

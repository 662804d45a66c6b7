package framework

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinel errors. Callers match them with errors.Is; a *FitError matches
// ErrUnschedulable.
var (
	// ErrUnschedulable: no node can run the pod (returned as a *FitError).
	ErrUnschedulable = errors.New("scheduler: pod is unschedulable")
	// ErrNoNodesAvailable: the snapshot has no nodes at all.
	ErrNoNodesAvailable = errors.New("scheduler: no nodes available to schedule pods")
	// ErrInvalidObject: a pod or node carries a value the scheduler cannot
	// interpret (an unparsable quantity, a missing name).
	ErrInvalidObject = errors.New("scheduler: invalid object")
	// ErrPodNotBound: a bound-pod event carried a pod without spec.nodeName.
	ErrPodNotBound = errors.New("scheduler: pod is not bound to a node")
	// ErrPodExists: the pod is already in the cache (assumed or bound).
	ErrPodExists = errors.New("scheduler: pod is already in the cache")
	// ErrPodNotFound: the pod is not in the cache.
	ErrPodNotFound = errors.New("scheduler: pod is not in the cache")
	// ErrPodNotAssumed: Forget of a pod that is bound, not assumed.
	ErrPodNotAssumed = errors.New("scheduler: pod is not assumed")
	// ErrNodeNotFound: the node is not in the cache.
	ErrNodeNotFound = errors.New("scheduler: node is not in the cache")
)

// FitError is the outcome of a scheduling cycle in which no node passed the
// filters. Its message is kube-scheduler's, word for word:
//
//	0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: gpu}.
//
// NodeReasons keeps every node's verdict (the reasons of the first filter
// that rejected it, in Kubernetes' words) for describe and trace.
type FitError struct {
	// Pod is the pod's "namespace/name".
	Pod string
	// NumAllNodes is the number of nodes in the snapshot.
	NumAllNodes int
	// NodeReasons maps each rejected node to its reasons. Nodes rejected
	// for the same reasons share a slice: treat them as read-only.
	NodeReasons map[string][]string
	// PreFilterMsg is the message of a PreFilter plugin that rejected the
	// pod before any node was filtered (every node then has its reasons);
	// empty when the filters ran.
	PreFilterMsg string
	// PostFilterMsg is the PostFilter plugins' message when none of them
	// helped ("preemption: ..."); appended to the message as
	// kube-scheduler does.
	PostFilterMsg string
	// Nomination is a PostFilter plugin's success: the pod is to be
	// nominated to a node once the victims are deleted (nil: none).
	Nomination *PostFilterResult
}

// Error formats the reason histogram exactly as kube-scheduler's
// FitError.Error: "<count> <reason>" entries sorted as strings, joined
// by ", ", between "0/N nodes are available: " and "."; after a PreFilter
// rejection, that plugin's message instead; then, after a PostFilter that
// did not help, " <its message>." (so a preemption message, itself a
// FitError's, ends in two periods, as kube-scheduler's do).
func (e *FitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "0/%v nodes are available:", e.NumAllNodes)
	if e.PreFilterMsg != "" {
		fmt.Fprintf(&b, " %v.", e.PreFilterMsg)
	} else if hist := e.Histogram(); len(hist) > 0 {
		entries := make([]string, 0, len(hist))
		for reason, n := range hist {
			entries = append(entries, fmt.Sprintf("%v %v", n, reason))
		}
		sort.Strings(entries)
		fmt.Fprintf(&b, " %v.", strings.Join(entries, ", "))
	}
	if e.PostFilterMsg != "" {
		fmt.Fprintf(&b, " %v.", e.PostFilterMsg)
	}
	return b.String()
}

// Is reports whether target is ErrUnschedulable.
func (e *FitError) Is(target error) bool { return target == ErrUnschedulable }

// Histogram counts the nodes that gave each reason.
func (e *FitError) Histogram() map[string]int {
	hist := make(map[string]int)
	for _, reasons := range e.NodeReasons {
		for _, r := range reasons {
			hist[r]++
		}
	}
	return hist
}

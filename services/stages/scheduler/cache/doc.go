// Package cache is the scheduler's model of the cluster: the nodes, the
// pods bound to them and the pods this scheduler replica assumed onto
// them ahead of the bind transaction, one framework.NodeInfo per node,
// with cheap per-cycle framework.Snapshots (UpdateSnapshot copies only the
// NodeInfos that changed). Beside it, the NodeAllocation records a bind
// re-checks and writes (allocation.go: CheckAllocationFit,
// MergeAllocation, the preemption reservations).
//
// It does no I/O: the scheduler stage feeds it from its store informers.
// A Cache is safe for concurrent use; a Snapshot is not (see
// framework.Snapshot).
//
// The caller:
//  1. feeds every node and bound-pod event (AddNode, UpdateNode,
//     RemoveNode; AddPod, UpdatePod, RemovePod), namespace, Service and
//     PodDisruptionBudget (SetNamespace, SetService, SetPDB); objects
//     passed in are retained and must not be modified afterwards;
//  2. AssumePod a pod onto the node chosen for it before the next cycle,
//     and ForgetPod it when its bind fails;
//  3. brings a cycle's Snapshot up to date with UpdateSnapshot from the
//     goroutine that owns it, never while it is being read.
//
// Example:
//
//	c := cache.NewCache()
//	_ = c.AddNode(node)
//	snap := framework.NewSnapshot()
//	c.UpdateSnapshot(snap)
//	_ = c.AssumePod(pod, "node-1")
package cache

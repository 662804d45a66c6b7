// Package scheduler is the decision core of podflow's scheduler stage: a
// cache of nodes and the pods on them, cheap per-cycle snapshots, and a
// Scheduler that filters, scores and picks a node for a pod the way
// kube-scheduler's default profile does. It does no I/O; the stage around
// it feeds the cache from store watches and binds with a store transaction.
//
// Filters (in kube-scheduler's order, the first failure decides a node's
// reasons): NodeUnschedulable, NodeName, TaintToleration (NoSchedule and
// NoExecute, with a node whose Ready condition is not True treated as
// tainted node.kubernetes.io/not-ready:NoSchedule, or unreachable when it is
// Unknown), NodeAffinity (spec.nodeSelector and required node affinity),
// NodePorts and NodeResourcesFit. Scores, each 0–100 and weighted by
// Config.Weights: TaintToleration (PreferNoSchedule), NodeAffinity
// (preferred), LeastAllocated, BalancedAllocation and ImageLocality. On
// large clusters a cycle filters only until it has found
// numFeasibleNodesToFind feasible nodes, starting where the previous cycle
// stopped. A pod no node can run gets a *FitError whose message is
// kube-scheduler's ("0/5 nodes are available: 3 Insufficient cpu, 2
// node(s) had untolerated taint {dedicated: gpu}.").
//
// Callers' obligations:
//
//  1. Feed the Cache every node and bound-pod event (AddNode, UpdateNode,
//     RemoveNode; AddPod, UpdatePod, RemovePod). Objects passed in are
//     retained and must not be modified afterwards.
//  2. After choosing a node, AssumePod the pod onto it before the next
//     cycle, so the next pods see its resources as taken; when the bind
//     transaction fails, ForgetPod it. The bound-pod event confirms it.
//  3. Bring the cycle's Snapshot up to date with Cache.UpdateSnapshot
//     before each cycle, from the goroutine that owns the Snapshot, and do
//     not update a Snapshot while it is being read.
//  4. Use a Scheduler from one goroutine.
//  5. In the bind transaction, re-check the pod against the node's stored
//     NodeAllocation with CheckAllocationFit and write MergeAllocation's
//     record, comparing the revision read, so that replicas never
//     overcommit a node.
//
// Example:
//
//	cache := scheduler.NewCache()
//	_ = cache.AddNode(node) // for each node event; AddPod for bound pods
//	sched, err := scheduler.New(scheduler.DefaultConfig())
//	if err != nil { ... }
//	snap := scheduler.NewSnapshot()
//	for pod := range pending {
//		cache.UpdateSnapshot(snap)
//		res, err := sched.Schedule(pod, snap)
//		if errors.Is(err, scheduler.ErrUnschedulable) {
//			// record err.Error() as the FailedScheduling event
//			continue
//		}
//		_ = cache.AssumePod(pod, res.Node)
//		// bind with a store transaction; on failure cache.ForgetPod(pod)
//	}
package scheduler

// Package nodelifecycle is kube-controller-manager's node lifecycle
// controller (pkg/controller/nodelifecycle) with its taint eviction
// controller (pkg/controller/tainteviction): what happens to a node that
// stops heartbeating, and to its pods.
//
// Every MonitorPeriod, for every node:
//
//  1. Health. A node whose last sign of life — its Ready condition's
//     lastHeartbeatTime, or its Lease's renewTime in kube-node-lease
//     (renewed by its agent at every heartbeat, kubelet's nodelease) — is
//     older than GracePeriod gets
//     its Ready, MemoryPressure, DiskPressure and PIDPressure conditions
//     set to Unknown, reason NodeStatusUnknown, "Kubelet stopped posting
//     node status." (NodeStatusNeverUpdated for a node that never posted
//     one), and an Event NodeNotReady.
//  2. Taints. From the Ready condition, as its NoExecute and NoSchedule
//     tainting passes: Ready=False is node.kubernetes.io/not-ready,
//     Ready=Unknown node.kubernetes.io/unreachable, each with effect
//     NoExecute and NoSchedule; Ready=True removes them. A taint added has
//     timeAdded set.
//  3. Pods marked. On a node whose Ready is not True, every pod's Ready
//     condition is set to False (MarkPodsNotReady) with an Event
//     NodeNotReady: the endpoints stage then drops them from Services.
//  4. Eviction. A pod on a node with NoExecute taints that it does not
//     all tolerate is evicted at once; one that tolerates them all, after
//     the smallest tolerationSeconds of the tolerations matching them,
//     counted from the taint's timeAdded (so a restarted controller does
//     not start the clock again); never, when none says how long. An
//     eviction is Kubernetes': the pod gets the condition DisruptionTarget
//     (reason DeletionByTaintManager), an Event TaintManagerEviction, and
//     a graceful deletion (stage.DeletePod). A pod whose node is dead
//     then stays Terminating until the node comes back and finishes it,
//     or the node is removed; its controllers no longer count it and
//     create replacements.
//
// One replica acts. The replicas elect a leader as
// kube-controller-manager's --leader-elect does: client-go's
// leaderelection over the Lease kube-system/podflow-nodelifecycle
// (controller.Elector; holderIdentity the replica's name and a random
// suffix). Only the leader passes; the others stand by and take the
// Lease once it was not renewed for LeaseDuration (15 s), measured on
// their own clocks. A leader that cannot renew for RenewDeadline (10 s)
// stops passing before that, so two replicas never act at once; a
// replica stopped cleanly releases the Lease after its last pass, and a
// standby takes over at once. Every step still reads fresh state and is
// idempotent, each write a compare-and-swap, so a pass cut short by a
// lost Lease leaves nothing half done that the next leader cannot finish.
//
// It does I/O: informers of the nodes, the pods and the node Leases
// (kube-node-lease alone), the election's Lease, compare-and-swap writes,
// deletion requests on the bus. As kube's tryUpdateNodeHealth, a pass
// decides on the informers' copies and reads a node and its Lease from
// the store only when the node is to be written. The informers keep only
// what a pass reads: of a node its identity, taints and conditions
// (nodeCut), of a pod its identity, node, tolerations and Ready status
// (podCutter, with pods of one node sharing their spec), of a Lease its
// renewTime; a pass looks at the pods of a node only when the node is
// not Ready or is tainted NoExecute.
//
// The caller (the nodelifecycle controller stage, pipeline.NodeLifecycle,
// with its own identity: it writes Nodes, Pods, Events and its Lease, and publishes
// the deletion requests of the pods it evicts):
//  1. creates a Controller with New and Starts it under its errgroup: it
//     syncs its informers, campaigns, and while it leads passes every
//     MonitorPeriod until ctx ends;
//  2. keeps GracePeriod longer than the node agents' heartbeat interval.
//
// Usage:
//
//	c, err := nodelifecycle.New(env, nodelifecycle.DefaultConfig())
//	err = c.Start(ctx, g)
package nodelifecycle

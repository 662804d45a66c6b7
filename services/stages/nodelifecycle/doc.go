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
// It does I/O: informers of the nodes and the pods, compare-and-swap
// writes, deletion requests on the bus. Every step reads fresh state and
// is idempotent, so replicas may run at once (each write is a
// compare-and-swap); kube elects one leader, which a Lease-based election
// can add without changing a step.
//
// The caller (the nodelifecycle controller stage, pipeline.NodeLifecycle,
// with its own identity: it writes Nodes, Pods and Events, and publishes
// the deletion requests of the pods it evicts):
//  1. creates a Controller with New and Starts it under its errgroup: it
//     syncs its informers and then passes every MonitorPeriod until ctx
//     ends;
//  2. keeps GracePeriod longer than the node agents' heartbeat interval.
//
// Usage:
//
//	c, err := nodelifecycle.New(env, nodelifecycle.DefaultConfig())
//	err = c.Start(ctx, g)
package nodelifecycle

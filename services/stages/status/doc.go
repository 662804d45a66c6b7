// Package status is the status stage, kubelet's status manager on the
// API side: it writes what node agents report into the store.
//
// It consumes two events from the node agents. A PodStatusReport is
// folded into the stored pod with compare-and-swap (ApplyReport: only
// from the node the pod is bound to, only when newer than the last report
// applied), together with the report's Kubernetes Events, in one store
// transaction. A PodDeleted from a node that finished stopping a pod
// removes the pod and releases what it held in the node's allocation, in
// one transaction. Its Reconcile marks nodes whose heartbeats stopped
// NotReady (the node lifecycle controller's grace period) and deletes
// Events older than Config.EventTTL. The node agents publish PodReady and
// PodNotReady themselves; the endpoints stage consumes them.
//
// NodeRestriction: a node speaks only for pods bound to it. An event whose
// envelope disagrees with its subject, or that names a pod bound to
// another node, is refused and dead-lettered (stage.CheckSubject,
// stage.CheckBound), as kube-apiserver's node authorizer would refuse it.
//
// It does I/O: a node informer, store reads and transactions.
//
// The caller:
//  1. creates one Stage per replica with NewStage and runs it with
//     stage.Run under the status stage's bus identity (replicas share one
//     durable consumer and split the reports);
//  2. lets stage.Run call Start before the first event (the node informer
//     syncs) and Reconcile periodically (a positive
//     stage.Config.ResyncPeriod), or nodes are never marked NotReady;
//  3. keeps Config.NodeMonitorGracePeriod longer than the node agents'
//     heartbeat interval.
//
// Usage:
//
//	st, err := status.NewStage(env, status.DefaultConfig())
//	err = stage.Run(ctx, conn, env, st, stage.Config{Runner: rc, ResyncPeriod: 10 * time.Second})
package status

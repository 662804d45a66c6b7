// Package status is the status stage, kubelet's status manager on the
// API side: it writes what node agents report into the store.
//
// It consumes two events from the node agents. A PodStatusReport is
// folded into the stored pod with compare-and-swap (ApplyReport: only
// from the node the pod is bound to, only when newer than the last report
// applied), together with the report's Kubernetes Events, in one store
// transaction; a report that leaves the pod Succeeded or Failed also
// releases it from its node's allocation in that transaction (a finished
// pod holds nothing on its node, as kubelet and kube-scheduler count it).
// A PodDeleted from a node that finished stopping a pod
// removes the pod and releases what it held in the node's allocation, in
// one transaction. Its Reconcile deletes Events older than
// Config.EventTTL. Nodes whose heartbeats stopped are the node lifecycle
// controller's (services/stages/nodelifecycle), which the status stage's
// process runs beside it with its identity. The endpoints stage follows the
// statuses it writes through its pod watch (the PodReady and PodNotReady a
// node reports travel inside its PodStatusReport, for the trace): the
// NodeRestriction below is what keeps a node out of another node's pods'
// endpoints.
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
//  2. lets stage.Run call Reconcile periodically (a positive
//     stage.Config.ResyncPeriod), or expired Events stay.
//
// Usage:
//
//	st, err := status.NewStage(env, status.DefaultConfig())
//	err = stage.Run(ctx, conn, env, st, stage.Config{Runner: rc, ResyncPeriod: 10 * time.Second})
package status

// Package disruption is kube-controller-manager's disruption controller
// (pkg/controller/disruption) as a podflow controller stage: it computes
// every PodDisruptionBudget's status, which the Eviction subresource
// (services/apiserver, eviction.go) reads and decrements.
//
// The computation is kube's own code, not a rewrite: kube_disruption.go
// is kube v1.37.2's disruption.go (sync, trySync, getExpectedPodCount,
// getExpectedScale, countHealthyPods, buildDisruptedPodMap, failSafe,
// updatePdbStatus and the controller finders) with only its receiver type
// renamed. What it calls on kube's DisruptionController — its listers,
// client, recorder and clock — this package implements over podflow's
// store (client.go), and controller.go is its informer handlers on the
// services/controller framework. So podflow does what kube does:
//
//  1. expectedPods, desiredHealthy, currentHealthy (Ready pods not being
//     deleted nor recently evicted) and disruptionsAllowed
//     (currentHealthy - desiredHealthy, 0 while no pods are expected),
//     from minAvailable or maxUnavailable, as an integer or a percentage;
//     a percentage (and maxUnavailable) scales by the pods' controllers'
//     replicas: a Deployment's (through its ReplicaSet), a ReplicaSet's,
//     a StatefulSet's or a ReplicationController's.
//  2. observedGeneration and the DisruptionAllowed condition
//     (SufficientPods, InsufficientPods; SyncFailed with
//     disruptionsAllowed 0 when the sync fails, kube's fail-safe).
//  3. disruptedPods: the evictions the Eviction subresource approved are
//     not counted healthy until their pods are marked deleted, for at most
//     DeletionTimeout (2m) each; the budget is synced again when an entry
//     expires.
//
// Not done: the clean-up of a stale DisruptionTarget pod condition (a pod
// whose eviction's delete failed), and custom resources' scale
// subresources (scale.go).
//
// Every status write goes through kube-apiserver's status strategy for
// PodDisruptionBudgets (services/registry), is compared on the revision
// it was decided from, and is expected (controller.Runner.Expect) by the
// budget: its next sync decides only from an informer that shows it.
//
// The caller (`podflow stage disruption`, ops/processes/roles) runs it as
// a controller stage with the stage's identity (pipeline.Disruption: it
// writes PodDisruptionBudgets, Events and Leases):
//
//	c, err := disruption.New(env, disruption.DefaultConfig(replica))
//	err = stage.Run(ctx, conn, env, c, stage.Config{NoConsumer: true, ResyncPeriod: 30 * time.Second})
package disruption

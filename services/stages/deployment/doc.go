// Package deployment is kube-controller-manager's Deployment controller
// (pkg/controller/deployment) as a podflow controller stage: it makes and
// scales a Deployment's ReplicaSets, and the ReplicaSet controller
// (services/stages/replicaset) makes their pods.
//
// The rollout logic is kube's own code, not a rewrite: kube_sync.go,
// kube_rolling.go, kube_recreate.go, kube_progress.go and kube_rollback.go
// are kube v1.37.2's sync.go, rolling.go, recreate.go, progress.go and
// rollback.go with only their receiver type renamed, over kube's
// deployment/util library (NewRSNewReplicas, maxSurge/maxUnavailable,
// revisions and their annotations, proportional scaling, conditions) and
// controller.ComputeHash. What they call on kube's DeploymentController
// — its client, ReplicaSet lister, ReplicaSet control and event recorder
// — this package implements over podflow's store (client.go), and
// controller.go is kube's syncDeployment and its informer handlers on the
// services/controller framework. So podflow does what kube does:
//
//  1. A Deployment's ReplicaSet for its template is named
//     <deployment>-<pod-template-hash>, the hash label on its labels,
//     selector and template, the Deployment its controller
//     (blockOwnerDeletion); ReplicaSets matching the selector are adopted
//     and those of the Deployment that no longer match released, as
//     kube's ReplicaSetControllerRefManager.
//  2. RollingUpdate within maxSurge and maxUnavailable, Recreate,
//     proportional scaling of a rollout's ReplicaSets on a scale,
//     revisionHistoryLimit, spec.paused, rollback (kubectl's client-side
//     `rollout undo`, and the deprecated rollbackTo annotation),
//     progressDeadlineSeconds (Progressing=False,
//     ProgressDeadlineExceeded).
//  3. Status as kube computes it: replicas, updatedReplicas,
//     readyReplicas, availableReplicas, unavailableReplicas,
//     terminatingReplicas, observedGeneration, collisionCount, and the
//     Available and Progressing conditions with kube's reasons and
//     messages; Events ScalingReplicaSet, DeploymentRollback, ...
//
// Every write goes through kube-apiserver's strategies for its kind
// (services/registry: defaulting, validation, generation bumps, status
// and spec kept apart), is compared on the revision it was decided from,
// and is expected (controller.Runner.Expect) by the Deployment being
// synced: the next sync of that Deployment decides only from informers
// that show it. A replica killed mid-sync leaves nothing a second owner
// could duplicate: the new ReplicaSet's name is deterministic (a second
// creation is 409 AlreadyExists, which kube's code takes as the same
// ReplicaSet), and a scale decided from a stale copy fails its
// compare-and-swap and is decided again.
//
// The caller (`podflow stage deployment`, ops/processes/roles) runs it as
// a controller stage with the stage's identity (pipeline.Deployment: it
// writes Deployments, ReplicaSets, Events and Leases, and makes no pods):
//
//	c, err := deployment.New(env, deployment.DefaultConfig(replica))
//	err = stage.Run(ctx, conn, env, c, stage.Config{NoConsumer: true, ResyncPeriod: 30 * time.Second})
package deployment

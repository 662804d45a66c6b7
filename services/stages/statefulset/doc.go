// Package statefulset is kube-controller-manager's StatefulSet controller
// (pkg/controller/statefulset) as a podflow controller stage.
//
// The decisions are kube's own code, not a rewrite: each sync runs kube
// v1.37.2's StatefulSetControl (NewDefaultStatefulSetControl:
// UpdateStatefulSet, its revisions, OrderedReady and Parallel pod
// management, RollingUpdate with partition and maxUnavailable, OnDelete,
// status, revisionHistoryLimit) unchanged. What that code calls — its
// pod object manager, status updater, controller history and event
// recorder — this package implements over podflow's store and pipeline
// (client.go), and controller.go is kube's StatefulSetController (its
// informer handlers, adoption of pods and ControllerRevisions, sync and
// minReadySeconds requeue) on the services/controller framework. So
// podflow does what kube does:
//
//  1. A set's pods are named <set>-<ordinal>, labelled
//     statefulset.kubernetes.io/pod-name, apps.kubernetes.io/pod-index
//     and controller-revision-hash, with spec.hostname the pod's name and
//     spec.subdomain the set's serviceName (so a headless Service of that
//     name gives each pod the DNS name <pod>.<service>.<ns>.svc).
//  2. OrderedReady: pod i+1 is created only once pods 0..i are Running
//     and Ready (available, with minReadySeconds), and a scale down
//     removes the highest ordinal first, one at a time, each gone before
//     the next; Parallel creates and deletes without waiting.
//  3. Updates: each template is a ControllerRevision
//     (<set>-<hash>, currentRevision and updateRevision in the status,
//     `kubectl rollout history/undo statefulset`); RollingUpdate replaces
//     pods from the highest ordinal down to partition, OnDelete only
//     creates deleted pods at the new revision.
//  4. Status: replicas, readyReplicas, currentReplicas, updatedReplicas,
//     availableReplicas, currentRevision, updateRevision, collisionCount,
//     observedGeneration, written through the status subresource.
//
// podflow has no PersistentVolume provisioner and refuses pods with
// persistentVolumeClaim volumes, so the api refuses a StatefulSet with
// volumeClaimTemplates (services/registry) and the controller creates no
// PersistentVolumeClaims (ErrNoClaims);
// persistentVolumeClaimRetentionPolicy is accepted and has nothing to act
// on.
//
// Pods are created through the pipeline (controller.Pods: the api
// stage's controller intake, admission, persistence; the same trace as a
// user's pod) and deleted gracefully. Every other write goes through
// kube-apiserver's strategies for its kind (services/registry), is
// compared on the revision it was decided from, and is expected
// (controller.Runner.Expect) by its set: the set's next sync decides only
// from informers that show it. A replica killed mid-sync leaves nothing a
// second owner could duplicate: pod names are deterministic (a second
// creation is 409 AlreadyExists), so are revision names (the same data
// under the same name is the same revision), and a status written from a
// stale copy fails its compare-and-swap.
//
// The caller (`podflow stage statefulset`, ops/processes/roles) runs it as
// a controller stage with the stage's identity (pipeline.StatefulSet: it
// writes StatefulSets, ControllerRevisions, Pods, Events and Leases, asks
// for pods on pipeline.ControllerPodsSubject and publishes the deletions
// of its pods):
//
//	c, err := statefulset.New(env, statefulset.DefaultConfig(replica), controller.NATSRequester(env.NATS))
//	err = stage.Run(ctx, conn, env, c, stage.Config{NoConsumer: true, ResyncPeriod: 30 * time.Second})
package statefulset

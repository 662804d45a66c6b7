// Package replicaset is kube-controller-manager's ReplicaSet controller
// (pkg/controller/replicaset) as a podflow controller stage, and its
// ReplicationController controller, which kube builds on the same code by
// converting each ReplicationController to a ReplicaSet and back
// (pkg/controller/replication): the stage name, pipeline.ReplicaSet or
// pipeline.ReplicationController, says which kind a replica controls.
//
// A sync of one object, on the replica that owns it (services/controller):
//
//  1. Its pods are the pods of its namespace it controls or that no one
//     controls; it adopts the orphans its selector matches (checking with
//     a fresh read that it is not being deleted) and releases its own that
//     no longer match, as kube's PodControllerRefManager.
//  2. Once its informers show every write it made, it asks again for the
//     pods whose creation got no answer, then creates what is missing in
//     the lowest free slots (controller.FreeNames: the same names on every
//     replica) through the pipeline, with kube's slow start, or deletes the
//     surplus ranked as kube ranks them (unscheduled, pending, not ready,
//     crowded nodes, ready for less time, restarted more, newer first; the
//     pod-deletion-cost annotation), at most BurstReplicas per sync.
//  3. Its status — replicas, fullyLabeledReplicas, readyReplicas,
//     availableReplicas (ready for minReadySeconds), terminatingReplicas,
//     observedGeneration and the ReplicaFailure condition — is written when
//     it changed, compared on the object's revision; a set with
//     minReadySeconds is synced again when its next pod becomes available.
//
// Events are kube's: SuccessfulCreate, SuccessfulDelete, FailedCreate,
// FailedDelete, limited per object as kube's recorder limits them.
//
// The caller (`podflow stage replicaset`, ops/processes/roles) runs it as
// a controller stage (stage.Run, NoConsumer) with the stage's identity:
// it writes its kind, Pods, Events and Leases, publishes the deletions of
// its pods, and asks for pods on pipeline.ControllerPodsSubject.
//
//	c, err := replicaset.New(env, replicaset.DefaultConfig(pipeline.ReplicaSet, replica), controller.NATSRequester(env.NATS))
//	err = stage.Run(ctx, conn, env, c, stage.Config{NoConsumer: true, ResyncPeriod: 30 * time.Second})
package replicaset

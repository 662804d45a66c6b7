// Package garbagecollector is the garbage collector stage, as
// kube-controller-manager's (pkg/controller/garbagecollector), for the
// core of it: background propagation. A dependent — a pod, ReplicaSet,
// Job or ControllerRevision (pipeline's garbage collector write kinds,
// Dependents) — whose
// metadata.ownerReferences name an owner that no longer exists (no object
// of that kind, namespace and name, or one with another uid) loses that
// reference; a dependent left with no owner is deleted: a pod gracefully
// (stage.DeletePod, as the ReplicaSet controller deletes its pods), any
// other object as the api stage deletes it (stage.DeleteObject: an object
// with finalizers is only marked). Deleting a ReplicaSet so deletes its
// pods in turn. An owner of a kind the store does not know is taken to
// exist (kube's collector cannot resolve it either and deletes nothing).
//
// The stage syncs a namespace when an object of it is deleted (a watch of
// the whole store), every namespace when a cluster-scoped object is, and
// every namespace on each resync (a dependent made with an owner already
// gone, a watch that broke). A sync reads its dependents, then each owner
// with a linearizable read, and writes with a compare-and-swap on the
// revision it read: a dependent changed meanwhile is read and judged
// again. It is idempotent — an object already gone is fine — so replicas,
// and a replica killed mid-sync and started again, agree.
//
// Orphan and foreground propagation are not implemented: the api stage
// does not record a delete's propagationPolicy (kube's "orphan" and
// "foregroundDeletion" finalizers), so `kubectl delete --cascade=orphan`
// deletes the dependents in the background as well.
package garbagecollector

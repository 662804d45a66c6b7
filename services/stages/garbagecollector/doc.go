// Package garbagecollector is the garbage collector stage, as
// kube-controller-manager's (pkg/controller/garbagecollector): it cascades
// the deletion of an owner to its dependents — the objects whose
// metadata.ownerReferences name it — in the three propagation modes of a
// DELETE (DeleteOptions.propagationPolicy):
//
//  1. Background. A dependent whose owners are all gone (no object of
//     that kind, namespace and name, or one with another uid) is deleted;
//     one with an owner left loses the references to the gone ones.
//  2. Orphan. The api stage marks the owner with the "orphan" finalizer
//     (stage.DeleteObjectWith); the collector removes the owner's
//     reference from every dependent, then the finalizer, and the owner
//     goes (an object marked for deletion left with no finalizer is
//     deleted, as kube-apiserver's store does on that update).
//  3. Foreground. The owner is marked with "foregroundDeletion"; the
//     collector deletes its dependents — one with another owner that
//     exists and is not itself waiting for its dependents only loses the
//     reference — and removes the finalizer once no dependent with
//     blockOwnerDeletion is left. A dependent with dependents of its own
//     (not a pod) is deleted in the foreground too, so the owner waits
//     for the whole tree; when one of those waits for its dependents as
//     well (a cycle, perhaps), its references to waiting owners are first
//     made non-blocking, as kube's collector does. Other dependents are
//     deleted with their own finalizers, else in the background.
//
// Owners and dependents are of every stored kind but Events (which take
// no part, and are the most numerous): the built-in kinds, custom
// resources (the process runs a crd.Catalog beside the stage, which
// registers their kinds), and cluster-scoped owners, whose dependents may
// be in any namespace. A pod is deleted gracefully (marked terminating,
// then stage.RequestDeletion, as the ReplicaSet controller deletes its
// pods), any other object as the api stage deletes it (stage.DeleteObject:
// an object with finalizers is only marked). An owner of a kind the
// process does not know is taken to exist (kube's collector cannot
// resolve it either and deletes nothing).
//
// The stage keeps, as kube's GraphBuilder, an index of every stored
// object but Events (index.go: key, kind, uid, owner references,
// deletion and its finalizers, revision; the metadata alone is decoded),
// listed once page by page and kept by a watch of every key, and syncs
// objects, not namespaces: an owner's deletion queues its dependents; an
// owner marked with one of its finalizers is synced with the dependents
// the index holds; a dependent new or given references to an owner the
// index does not hold (kube's virtual node) is checked; a waiting owner
// whose dependent came, went or changed its references is synced again.
// A sync reads the object afresh, each owner with a linearizable read (an
// owner found gone is remembered by key and uid, kube's
// absentOwnerCache), and writes with a compare-and-swap on the revision
// it read: a deletion that meets a changed dependent fails the sync,
// which is retried and judges the dependent again; a reference or
// finalizer removal is applied again to a fresh read. So an index behind
// the store delays, and never misleads, the collector. Reconcile queues
// from the index alone what its scan calls for (a failed sync), reading
// nothing; the index is listed again only when the watch breaks, and the
// kinds registered after the list (custom resources) are listed in as
// they come. It is idempotent — an object already gone is fine — so
// replicas, each with its own index, and a replica killed mid-sync and
// started again, agree. The store lets the stage change nothing but
// ownerReferences, its two finalizers and deletion
// (pipeline.StoreWriteFilter).
//
// Not implemented: pods, Services and Namespaces take no garbage
// collection finalizers (the api stage deletes them as before, their
// dependents in the background); Services, Namespaces and
// CustomResourceDefinitions are not deleted as dependents (their deletion
// is the api stage's: a foreground owner releases them instead); and a
// pod with dependents is deleted as any pod, not in the foreground.
package garbagecollector

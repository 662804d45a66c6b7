// Package objects stores podflow's Kubernetes objects in the replicated
// store: the kinds and their keys (Kubernetes' etcd layout), encoding
// (resourceVersion is the key's ModRevision, never stored), typed reads
// (Get, List), compare-and-swap writes (Create, Update, Delete, Mutate)
// and typed multi-object transactions (Txn, Store.Commit).
//
// A Store sits on a small KV interface — the raftstore client's Get, List,
// Create, Update, Delete, Txn and Watch — so a stage's logic is unit
// tested against objectstest.KV, an in-memory fake with the same
// revisions, conflicts and errors, and runs against raftstore through
// New (or FromKV(RaftKV(client))).
//
// The caller:
//  1. matches store errors with errors.Is against raftstore's sentinels
//     (raftstore.ErrNotFound, ErrAlreadyExists, ErrConflict), which pass
//     through wrapped;
//  2. writes an object it read with the resourceVersion it read it at
//     (Update, Txn.Unchanged), and retries a conflict from a fresh read
//     (Mutate does both);
//  3. states a transaction in objects, never in keys and bytes (Txn).
//
// A bind, for example:
//
//	txn := objects.Txn{}.
//		Unchanged(pod).           // the pod we decided on
//		Compare(alloc, allocRev). // the allocation we fitted against
//		Put(boundPod).Put(alloc).Put(event)
//	rev, err := st.Commit(ctx, txn)
//	switch {
//	case objects.ConflictOn(err, alloc): // the node's allocation moved on
//	case errors.Is(err, raftstore.ErrConflict): // the pod moved on
//	}
//
// Most built-in Kubernetes kinds are generic (Kind.Generic): registered
// as data (GenericKind: group, version, kind, resource, store prefix,
// discovery names, subresources) and stored as *corev1.Unstructured —
// metadata as every kind's, the rest as the object's Kubernetes JSON
// (services/manifest converts it to and from the k8s.io/api type).
// Register adds one at run time; the registry is safe for concurrent use.
//
// A Store is safe for concurrent use; a Txn is a value (each method
// returns a new one).
package objects

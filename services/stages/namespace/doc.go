// Package namespace is the namespace controller stage,
// kube-controller-manager's namespace controller: it empties every
// namespace being terminated, then removes it.
//
// A namespace DELETE (services/nslifecycle) only marks the namespace:
// deletionTimestamp, phase Terminating, the "kubernetes" finalizer. The
// Controller then deletes every namespaced kind of the registry (Content),
// pods first, through graceful deletion (stage.DeletePod: a bound pod is
// stopped by its node, then removed by the status stage), and the rest
// only once no pod remains (Kubernetes' OrderedNamespaceDeletion), sets the
// NamespaceDeletionContentFailure, NamespaceContentRemaining and
// NamespaceFinalizersRemaining conditions as Kubernetes words them, then
// removes the finalizer and the namespace. It does I/O: an informer of
// the namespaces, and store reads and writes.
//
// The caller (today the api process, with the api stage's identity):
//  1. creates one Controller per replica with New and Starts it under its
//     errgroup; several replicas may run at once (every write is a
//     compare-and-swap from a fresh read, every step idempotent);
//  2. calls Controller.Enqueue with a namespace it just marked deleted,
//     for a pass at once (the informer finds it too, a little later);
//  3. calls Controller.Reconcile periodically (namespaces whose change it
//     missed); a restarted Controller resumes every terminating namespace
//     from its informer's first list.
//
// Usage:
//
//	c, err := namespace.New(env, namespace.DefaultConfig())
//	err = c.Start(ctx, g)
//	adm, err := nslifecycle.NewAdmission(env.Store, c.Enqueue)
//	st, ns := adm.Delete(ctx, "team") // marked; c empties and removes it
package namespace

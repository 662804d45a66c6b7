// Package namespace is Kubernetes' namespace lifecycle for podflow:
// kube-apiserver's NamespaceLifecycle admission and namespace strategy,
// and kube-controller-manager's namespace controller.
//
//   - A new Namespace is stored with spec.finalizers ["kubernetes"] and
//     phase Active (PrepareForCreate); an update keeps its finalizers,
//     status and deletionTimestamp (PrepareForUpdate).
//   - A DELETE (Delete) marks it: deletionTimestamp, phase Terminating,
//     the "kubernetes" finalizer. default, kube-system and kube-public are
//     refused with 403 "this namespace may not be deleted"; a second
//     DELETE is 409, as kube-apiserver's.
//   - New content in a namespace that does not exist is 404 NotFound, in
//     one being terminated 403 Forbidden "unable to create new content in
//     namespace X because it is being terminated" (CheckCreate, and
//     Controller.Admit from the informer's cache for pods).
//   - The Controller empties a terminating namespace — every namespaced
//     kind of the registry (Content), pods through graceful deletion
//     (stage.DeletePod: a bound pod is stopped by its node, then removed
//     by the status stage) — sets the NamespaceDeletionContentFailure,
//     NamespaceContentRemaining and NamespaceFinalizersRemaining
//     conditions as Kubernetes words them, then removes the finalizer and
//     the namespace.
//
// The caller (the api stage, in every replica):
//  1. creates one Controller per replica with New and Starts it under its
//     errgroup; several replicas may run at once (every write is a
//     compare-and-swap from a fresh read, every step idempotent);
//  2. answers a namespace DELETE with Controller.Delete, which queues the
//     namespace at once;
//  3. calls Controller.Reconcile periodically (namespaces whose change it
//     missed); a restarted Controller resumes every terminating namespace
//     from its informer's first list;
//  4. writes new namespaced content comparing the Namespace's revision
//     (objects.Txn.Unchanged), so a DELETE between its check and its
//     write refuses the write too.
//
// Usage:
//
//	c, err := namespace.New(env, namespace.DefaultConfig())
//	err = c.Start(ctx, g)
//	st, ns := c.Delete(ctx, "team") // 200 and the namespace, Terminating
//	st = c.Admit(ctx, "team", "pods", "web") // 403 while it terminates
package namespace

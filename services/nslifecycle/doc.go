// Package nslifecycle is Kubernetes' namespace lifecycle on the API
// side: kube-apiserver's namespace strategy and NamespaceLifecycle
// admission. The namespace controller that empties and removes a deleted
// namespace is a stage (services/stages/namespace).
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
//     Admission.Admit from an informer's cache).
//
// The caller (the api stage):
//  1. creates one Admission per replica with NewAdmission and Starts it
//     under its errgroup before it admits anything;
//  2. answers a namespace DELETE with Admission.Delete;
//  3. writes new namespaced content comparing the Namespace's revision
//     (objects.Txn.Unchanged), so a DELETE between its check and its
//     write refuses the write too.
//
// Usage:
//
//	a, err := nslifecycle.NewAdmission(store, controller.Enqueue)
//	err = a.Start(ctx, g)
//	st, ns := a.Delete(ctx, "team")          // 200 and the namespace, Terminating
//	st = a.Admit(ctx, "team", "pods", "web") // 403 while it terminates
package nslifecycle

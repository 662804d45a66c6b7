// Package storeclient gives code written against client-go — kube-apiserver's
// admission plugins (webhooks, ValidatingAdmissionPolicy) above all — podflow's
// store as its Kubernetes API, read-only, in process:
//
//   - Factory is client-go's informers.SharedInformerFactory whose informers
//     list and watch the store (services/objects) directly, each object in
//     its k8s.io/api form (services/manifest): the typed informers and
//     listers of every group (f.Core().V1().Namespaces().Lister(), ...) and
//     ForResource for any stored kind, a kind without a Go type (a custom
//     resource) as *unstructured.Unstructured.
//   - Clientset and Dynamic are a kubernetes.Interface and a dynamic.Interface
//     whose GETs (one object, or a list) read the store; every other verb is
//     refused with 405 MethodNotAllowed. They are what kube's plugins fall
//     back to when their caches have not seen an object yet.
//   - RESTMapper maps the stored kinds (objects.Kinds, rebuilt when a kind is
//     registered).
//
// It is what kube-apiserver's loopback client and shared informers are to
// its admission plugins, without the HTTP round trip.
//
// The caller:
//  1. builds one Factory per process with New and asks it for informers
//     (directly, or through the plugins it hands it to) before Start;
//  2. calls Start (or StartWithContext) once every informer is asked for,
//     then WaitForCacheSync; informers asked for later start on the next
//     Start;
//  3. stops the informers by closing the stop channel (cancelling the
//     context) and calls Shutdown, which waits for their goroutines;
//  4. treats the cached objects as read-only (they are shared);
//  5. to know when another process's view has reached this one's, calls
//     Track for the kinds concerned before asking for their informers,
//     then Revision (the revision to hand over) and WaitForRevision (to
//     wait, in the other process, until every event handler of those
//     informers has been given the changes up to it).
//
// Example:
//
//	f := storeclient.New(store)
//	nsLister := f.Core().V1().Namespaces().Lister()
//	f.StartWithContext(ctx)
//	f.WaitForCacheSync(ctx.Done())
//	ns, err := nsLister.Get("default")
//
// A kind the store does not keep, or keeps at another version than the one
// asked for, gets an informer whose list fails with an error naming it; it
// never syncs.
package storeclient

// Package crds is the CRD controller stage: apiextensions-apiserver's
// controllers of CustomResourceDefinitions, in one worker.
//
//   - Naming (pkg/controller/status): a definition's requested names are
//     accepted unless another definition of its group holds one
//     (status.acceptedNames, NamesAccepted with reason NoConflicts or
//     PluralConflict, SingularConflict, ShortNamesConflict, KindConflict,
//     ListKindConflict). The accepting write is one store transaction
//     that also compares every other definition of the group, so replicas
//     deciding at once never accept the same name twice.
//   - Establishing (pkg/controller/establish): Established True once the
//     names are accepted (False, InvalidCABundle, for a conversion
//     webhook whose caBundle is not PEM). Every api replica serves a
//     definition from the moment its names are accepted; one that has not
//     seen it yet reads it from the store (crd.Catalog.Sync).
//   - Cleanup (pkg/controller/finalizer): a deleted definition (marked by
//     the api stage: deletionTimestamp, the
//     customresourcecleanup.apiextensions.k8s.io finalizer, Terminating)
//     has its objects deleted in every namespace — those with finalizers
//     of their own are marked and waited for —, then the finalizer
//     removed, and the definition with it.
//
// It writes the store directly, each write a compare-and-swap of what it
// read (a definition's conditions are the controller's own bookkeeping),
// and the conditions carry kube's reasons and messages.
//
// The caller (today the api process):
//  1. creates one Controller per replica with New and Starts it under its
//     errgroup; several replicas may run at once;
//  2. calls Reconcile periodically (definitions whose change it missed).
//
// Usage:
//
//	c, err := crds.New(env, crds.DefaultConfig())
//	err = c.Start(ctx, g)
package crds

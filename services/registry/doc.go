// Package registry gives podflow's generic kinds (services/objects'
// kinds registered as data: apps/v1 Deployment, batch/v1 Job, ...)
// kube-apiserver's own write semantics, through kube-apiserver's own code
// (k8s.io/kubernetes v1.37): each kind's defaulting (legacyscheme with
// pkg/apis/<group>/install), conversion to its internal type, and its
// registry strategies (pkg/registry/<group>/<resource>: Strategy,
// StatusStrategy, ...) run through k8s.io/apiserver's rest.BeforeCreate
// and rest.BeforeUpdate, as the generic store runs them. Validation
// messages, generation bumps, status reset on create, spec kept on status
// updates, a Job's generated selector, a CSR's requester: all exactly
// kube-apiserver's. It also prints kube-apiserver's tables of the
// built-in kinds (pkg/printers/internalversion).
//
// It links k8s.io/kubernetes, so the packages that use it take it as a
// small interface of their own (the api stage's Config.Registry, the
// HTTPS server's Config.Printer) and only the podflow binary and the
// tests that need it link it.
//
// The caller:
//  1. calls PrepareCreate before it stores a new object of a generic kind
//     and PrepareUpdate (with the stored object) before it replaces one,
//     after its own authorization and admission, and stores what they
//     leave in obj: uid, creationTimestamp and generation are the
//     strategy's, never the caller's;
//  2. answers a non-nil Status to the client as it is (422 Invalid with
//     its causes, ...) and the warnings as Warning headers;
//  3. names the subresource a write goes through:
//     a status update keeps the stored spec, a scale update is validated
//     as a Scale.
//
// A Registry is safe for concurrent use. Example (the api stage):
//
//	reg, err := registry.New(registry.Config{Authorize: rbac.Authorize, Store: st})
//	...
//	warnings, status := reg.PrepareCreate(ctx, user, "", deployment)
package registry

// Package quota enforces ResourceQuotas with Kubernetes' own quota code
// (k8s.io/apiserver/pkg/quota/v1, the evaluators of
// k8s.io/kubernetes/pkg/quota/v1/evaluator/core and the admission
// plugin's CheckRequest): object counts (count/<resource>.<group> and the
// legacy configmaps, secrets, services, persistentvolumeclaims, ...),
// compute resources (requests.cpu, limits.memory, pods, ...), scopes and
// scope selectors, and kube's error messages, e.g.
//
//	configmaps "c3" is forbidden: exceeded quota: q, requested: count/configmaps=1, used: count/configmaps=2, limited: count/configmaps=2
//
// It links k8s.io/kubernetes, so the stages take it as a small interface
// of their own (admission.Config.Quota, api.Config.Quota) and only the
// podflow binary and tests link it.
//
// The caller of Admission.Admit:
//  1. calls it after its own validation and admission, right before it
//     stores a new object (or replaces one, for the kinds kube evaluates
//     on update), and not for a dry run;
//  2. answers a non-nil Status to the client as it is (403 Forbidden);
//  3. stores the object only after Admit returned nil: Admit has then
//     charged the object's usage to every matching quota's status.used
//     with a compare-and-swap on the quota's revision, so concurrent
//     admissions, on any replica, never overshoot a quota's hard limit.
//
// A charge whose object is never stored (the write fails after Admit) is
// released by the quota controller (services/stages/resourcequota), which
// recomputes status.used from the store, as kube's.
package quota

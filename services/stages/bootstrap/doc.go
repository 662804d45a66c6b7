// Package bootstrap keeps what every podflow cluster has from its first
// moment, as kube-apiserver's controllers do, so that any set of
// processes started by hand has them (no bootstrap lives only in
// `podflow up`):
//
//   - the system namespaces default, kube-system, kube-public and
//     kube-node-lease (kube-apiserver's system namespaces controller, and
//     its kubernetes service controller for default): created when
//     missing, every Interval;
//   - the bootstrap RBAC policy (auth.BootstrapPolicy: cluster-admin bound
//     to system:masters, admin, edit, view), as kube-apiserver's
//     bootstrap-roles post-start hook reconciles it: a missing role or
//     binding is created; one annotated
//     rbac.authorization.kubernetes.io/autoupdate "true" gets back the
//     rules, subjects, labels and annotations the policy has and it lacks
//     (nothing is removed); "false" leaves it alone; a binding whose
//     roleRef changed is re-created.
//
// It runs in the api process (as these run in kube-apiserver), with the
// api stage's store identity. Every write is a create-if-absent or a
// compare-and-swap from a fresh read, so any number of api replicas may
// run it at once.
//
// The caller:
//  1. creates a Controller with New and starts it (a stage.Starter,
//     composed beside the api stage: stage.Compose): Start returns once
//     the first pass succeeded (retrying until ctx ends), so the api
//     process answers only once the default namespace exists;
//  2. nothing else: the Controller passes again every Interval.
//
// Usage:
//
//	b, err := bootstrap.New(env, bootstrap.DefaultConfig())
//	h := stage.Compose(apiStage, b, frontDoor)
package bootstrap

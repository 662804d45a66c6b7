// Package serviceaccount is the ServiceAccount controller stage,
// kube-controller-manager's serviceaccount-controller: every active
// namespace has a ServiceAccount named "default", created when the
// namespace appears and re-created when it is deleted.
//
// It is a controller stage: it consumes no events. Informers on the
// namespaces and the ServiceAccounts queue a namespace when it is added
// or changes and when its "default" ServiceAccount is deleted; Reconcile
// (at start and every resync period) queues every namespace, so a missed
// change heals. A sync creates the account with nslifecycle.CreateIn: one
// store transaction that writes it only while it is absent and the
// namespace is unchanged (not marked deleted since it was read), so
// several replicas may run at once — the one that loses the race finds
// the account there, which is success — and nothing is created in a
// namespace being terminated. A namespace that is not Active gets
// nothing, as kube's controller.
//
// The caller (`podflow stage serviceaccount`, ops/roles):
//  1. creates a Controller with New and runs it as a stage (stage.Run with
//     stage.Config.NoConsumer), which calls Start and then Reconcile every
//     resync period;
//  2. gives it a store identity that may write ServiceAccounts
//     (pipeline.StoreWriteACL: stage-serviceaccount).
//
// Usage:
//
//	c, err := serviceaccount.New(env, serviceaccount.DefaultConfig())
//	err = stage.Run(ctx, conn, env, c, stage.Config{Runner: rc, NoConsumer: true, ResyncPeriod: time.Minute})
package serviceaccount

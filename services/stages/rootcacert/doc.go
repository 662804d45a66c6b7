// Package rootcacert is the root CA certificate publisher stage,
// kube-controller-manager's root-ca-cert-publisher: every namespace has a
// ConfigMap "kube-root-ca.crt" whose "ca.crt" is the cluster CA that signs
// the API server's serving certificate, so that a pod can verify
// https://kubernetes.default.svc (its projected kube-api-access volume
// mounts it). The ConfigMap is created when the namespace appears,
// re-created when it is deleted and repaired when it is edited (its data
// put back, the kubernetes.io/description annotation restored), as
// kube's publisher does.
//
// It is a controller stage: it consumes no events. Informers on the
// namespaces and the ConfigMaps queue a namespace when it is added or
// changes and when its ConfigMap changes or is deleted; Reconcile (at
// start and every resync period) queues every namespace. A create goes
// through nslifecycle.CreateIn (absent and the namespace unchanged, in one
// store transaction); a repair is a compare-and-swap from the cached
// revision. Several replicas may run at once: a lost race is a conflict,
// and the next sync reads the winner's write.
//
// The caller (`podflow stage rootcacert --root-ca-file F`, ops/roles):
//  1. creates a Publisher with New and the CA's PEM, and runs it as a
//     stage (stage.Run with stage.Config.NoConsumer);
//  2. gives it a store identity that may write ConfigMaps
//     (pipeline.StoreWriteACL: stage-rootcacert).
//
// Usage:
//
//	cfg := rootcacert.DefaultConfig()
//	cfg.RootCA, err = os.ReadFile("ca.crt")
//	p, err := rootcacert.New(env, cfg)
package rootcacert

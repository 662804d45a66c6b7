// Package stages holds podflow's stages, one package each. A stage is an
// actor on the bus: a stage.Handler over a durable JetStream consumer that
// every replica of the stage shares (adding a replica splits the work),
// usually with a Start (informers, request-reply subscriptions) and a
// Reconcile (level-triggered healing from the store). It reads and writes
// the store, publishes the next event, and never imports another stage:
// stages meet only on the bus and in the store (services/layering_test.go).
//
// The lifecycle stages, in pipeline order:
//
//   - api: authn and RBAC of pod creations and object requests, on the bus
//     and (as the HTTPS front door's backend) in process;
//   - admission: mutation, validation, Pod Security;
//   - persistence: the first store write of a pod, and the reply;
//   - scheduler: filter, score and bind (a store transaction);
//   - status: node agents' reports into the store.
//
// The controller stages, each a reconcile loop over the store (informers,
// a workqueue, a periodic resync; no consumer: pipeline.Controller,
// stage.Config.NoConsumer):
//
//   - endpoints: EndpointSlices from Ready pods, driven by a watch of pods;
//   - serviceaccount: a "default" ServiceAccount in every namespace;
//   - rootcacert: the kube-root-ca.crt ConfigMap in every namespace;
//   - resourcequota: every ResourceQuota's status.hard and status.used,
//     recounted from the store (quota admission charges them).
//
// Controllers run in the api process, with the api stage's identity, as
// kube-apiserver runs them:
//
//   - namespace: empties and removes deleted namespaces;
//   - bootstrap: the system namespaces and the bootstrap RBAC policy;
//   - kubernetesservice: default/kubernetes and its EndpointSlice (the api
//     replicas' addresses).
//
// How a stage's replica is composed into a process (the handler, the
// parts beside it, its bus identity) is the business of ops's process
// roles.
package stages

// Package endpoints is the endpoints stage, Kubernetes' EndpointSlice
// controller: it keeps the EndpointSlices of each Service listing the
// Ready pods the Service's selector matches, a slice per set of resolved
// ports, which the node proxies and the cluster DNS read.
//
// It is a controller stage: it consumes no events (pipeline.Controller).
// As kube's EndpointSlice controller, it is driven by informers: of
// Services, of Endpoints and slices (legacy.go), and of pods — the pod
// watch, run only while a Service with a selector exists. A pod added,
// changed in what makes it an endpoint (kube's podEndpointsChanged:
// readiness, termination, IP, node, hostname, labels) or deleted queues
// the Services that select it, before or now. Every sync computes a
// Service's slices from a linearizable read of its namespace's pods and
// writes them with compare-and-swap, so replicas and retries never
// overwrite a fresher slice with a staler one; a pod that a change of its
// own made join or leave a Service is announced as EndpointsUpdated, the
// pod's event (its uid, request id and trace), caused by the PodReady or
// PodNotReady its node's status report carried when readiness moved it,
// so the pod's trace shows it joining or leaving. Reconcile syncs every
// Service and removes the slices of Services that are gone.
//
// The stage reads pods as the status stage stored them: NodeRestriction
// is the store's (a node writes only the status of its own pods), not
// the stage's.
//
// It does I/O: informers of Services, Endpoints, slices and pods, store
// reads and writes, and publishes.
//
// The caller:
//  1. creates one Stage per replica with NewStage and runs it with
//     stage.Run under the endpoints stage's bus identity;
//  2. runs it as a controller stage (stage.Config.NoConsumer), which
//     calls Start (the informers sync and the worker starts) and
//     Reconcile periodically (a positive stage.Config.ResyncPeriod): the
//     Services present at start are synced by the first Reconcile, not
//     by their informer events.
//
// Usage:
//
//	st, err := endpoints.NewStage(env)
//	err = stage.Run(ctx, conn, env, st, stage.Config{NoConsumer: true, ResyncPeriod: 30 * time.Second})
package endpoints

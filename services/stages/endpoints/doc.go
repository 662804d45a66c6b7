// Package endpoints is the endpoints stage, Kubernetes' EndpointSlice
// controller: it keeps the EndpointSlices of each Service listing the
// Ready pods the Service's selector matches, a slice per set of resolved
// ports, which the node proxies and the cluster DNS read.
//
// It consumes PodReady, PodNotReady and PodDeleted from the node agents,
// and watches Services and pods' labels through informers. Every sync
// computes a Service's slices from a linearizable read of its namespace's
// pods and writes them with compare-and-swap, so replicas and retries never
// overwrite a fresher slice with a staler one; a change caused by a pod's
// event is announced as EndpointsUpdated, so the pod's trace shows it
// joining or leaving the Service. An event the store does not reflect yet
// is retried (ErrStoreBehind). Reconcile syncs every Service and removes
// the slices of Services that are gone.
//
// NodeRestriction: an event is acted on only when its envelope agrees with
// its subject and, for a stored pod, comes from the node it is bound to
// (stage.CheckSubject, stage.CheckPodEvent); others are refused.
//
// It does I/O: informers of Services and pods, store reads and writes,
// and publishes.
//
// The caller:
//  1. creates one Stage per replica with NewStage and runs it with
//     stage.Run under the endpoints stage's bus identity;
//  2. lets stage.Run call Start before the first event (the informers
//     sync and the worker starts) and Reconcile periodically (a positive
//     stage.Config.ResyncPeriod): the Services present at start are
//     synced by the first Reconcile, not by their informer events.
//
// Usage:
//
//	st, err := endpoints.NewStage(env)
//	err = stage.Run(ctx, conn, env, st, stage.Config{Runner: rc, ResyncPeriod: 30 * time.Second})
package endpoints

// Package kubernetesservice keeps the Service default/kubernetes and its
// EndpointSlice, as kube-apiserver's kubernetes service controller and its
// lease endpoint reconciler do: the Service has the first IP of the
// service CIDR (10.96.0.1 by default), port 443 "https" to the API
// servers' port; its EndpointSlice lists the address of every live api
// replica (core/v1 Endpoints "kubernetes" is the read-only view of it the
// front door serves), so a pod reaches the API at
// https://kubernetes.default.svc through the node proxy.
//
// Each api replica runs one Controller. Every Interval it:
//  1. creates the Service when it is missing (its ClusterIP reserved in the
//     same store transaction, services/ipalloc);
//  2. creates the default ServiceCIDR "kubernetes" (the service CIDR,
//     condition Ready) when it is missing, and makes it Ready when it has
//     no Ready condition, as kube-apiserver's default-servicecidr
//     controller does;
//  3. renews its lease: a store key under LeasePrefix named after its
//     address (Config.Endpoint: the address pods reach it at), holding the
//     port and the time it expires (LeaseTTL from now) — kube's
//     /masterleases/ keys;
//  4. lists the leases, deletes the expired ones, and makes the
//     EndpointSlice list the addresses of the live ones (never none: with
//     no live lease it leaves the slice as it is, as kube refuses to erase
//     every endpoint).
//
// On Stop the replica deletes its lease and reconciles once more, so a
// replica that stops cleanly leaves the slice at once; one that dies
// leaves it after LeaseTTL. Every write is a create-if-absent or a
// compare-and-swap: replicas may run at once.
//
// The caller (the api process, ops/roles.APIProcess):
//  1. creates a Controller with New, giving the service CIDR's allocator
//     and the replica's endpoint (apiserver.PodListeners.Endpoint: the
//     node's bridge gateway the front door listens on, or its own listen
//     address when pods cannot reach it otherwise),
//  2. starts it beside the api stage (stage.Compose); ctx's end stops it.
//
// Usage:
//
//	c, err := kubernetesservice.New(env, kubernetesservice.Config{ServiceIPs: alloc, Endpoint: pl.Endpoint})
//	h := stage.Compose(apiStage, c)
package kubernetesservice

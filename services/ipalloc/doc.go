// Package ipalloc allocates Services' ClusterIPs from the service CIDR, as
// Kubernetes 1.33 does with its IPAddress objects: every allocated IP is
// one store key under Prefix, named by the IP, and creating that key is
// the lock — the store's compare-and-swap makes sure no IP is handed out
// twice, across api replicas and front doors. The key and the Service are
// written in one store transaction, so a Service never exists without its
// IP, nor an IP without its Service.
//
// The caller (the api stage, the one place both front doors — the bus and
// the HTTPS Kubernetes API — create Services):
//  1. creates a Service with Create, replaces one with Update (passing the
//     stored Service it read) and deletes one with Delete — never with the
//     objects.Store methods, which would skip the reservations;
//  2. maps the errors: an *Error (errors.Is ErrAllocated, ErrNotInRange,
//     ErrImmutable, ErrInvalid) is a 422 Invalid, ErrFull a 500, and
//     raftstore.ErrConflict / ErrAlreadyExists on the Service itself a
//     409.
//
// Create fills spec.clusterIP and spec.clusterIPs: a requested IP is
// honoured when it is in range and free; "None" makes a headless Service
// (no IP); an ExternalName Service gets none. Dynamic allocation prefers
// the upper part of the range, leaving the lower band (1/16 of the range,
// 16 to 256 addresses) for requested IPs, as Kubernetes does.
//
//	alloc, err := ipalloc.New(ipalloc.DefaultConfig())
//	rev, err := alloc.Create(ctx, store, svc) // svc.Spec.ClusterIp is set
package ipalloc

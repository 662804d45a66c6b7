// Package dns is podflow's cluster DNS, a small authoritative server over
// github.com/miekg/dns answering from Services and EndpointSlices as
// CoreDNS's kubernetes plugin does:
//
//   - <svc>.<ns>.svc.<domain> A: the ClusterIP, or for a headless Service
//     the IP of every Ready endpoint (none: NXDOMAIN);
//   - <endpoint>.<svc>.<ns>.svc.<domain> A: a Ready endpoint, named by its
//     hostname (a pod's spec.hostname when its spec.subdomain names the
//     Service) or by its address with dashes;
//   - _<port>._<proto>.<svc>.<ns>.svc.<domain> SRV for each named port:
//     the Service's name and port, or for a headless Service each
//     endpoint's name and port;
//   - <svc>.<ns>.svc.<domain> CNAME <externalName> for an ExternalName
//     Service, with the target's records when it lies inside the cluster
//     domain;
//   - <a-b-c-d>.<ns>.pod.<domain> A: a.b.c.d (CoreDNS's "pods insecure");
//   - <reversed ip>.in-addr.arpa PTR: a ClusterIP's Service, else the
//     names of the endpoints with that address.
//
// A name under the cluster domain that names nothing is NXDOMAIN; a name
// outside it, or a reverse name of no cluster address, is REFUSED. The
// server never forwards a query anywhere: it has no upstream, so no DNS
// packet leaves the machine because of it.
//
// The caller:
//
//  1. calls Sync with every Service and EndpointSlice it knows, whenever
//     one changes (safe from any goroutine; queries see the old or the new
//     records, never a mix) — the Linux node agent feeds it from the same
//     watch as its proxy (ops/processes/nodewire.Syncers);
//
//  2. calls Start, and Close on shutdown (it closes the listeners). The
//     node agent listens on its bridge's gateway, port 53, with
//     Config.Device the bridge, so only its pods reach the server.
//
//     s, _ := dns.New(dns.DefaultConfig())
//     _, _ = s.Sync(ctx, services, slices)
//     if err := s.Start(); err != nil { ... } // s.Addr() is where it listens
//     defer s.Close()
package dns

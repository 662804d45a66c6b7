package roles

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// simNet is the simulated cluster's network as wget inside a simulated
// container sees it: a Service's name (NAME, NAME.NS, NAME.NS.svc,
// NAME.NS.svc.cluster.local) or ClusterIP reaches one of its ready
// endpoints, a pod IP that pod; each pod answers HTTP with a line naming
// itself. Anything else fails at once with busybox wget's words.
type simNet struct{ st *objects.Store }

func (n simNet) Get(ctx context.Context, ns, raw string) ([]byte, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("bad address '%s'", raw)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("unsupported scheme %q (the simulated network speaks http)", u.Scheme)
	}
	host := u.Hostname()
	port := 80
	if p := u.Port(); p != "" {
		port, _ = strconv.Atoi(p)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return n.byIP(ctx, ip, port, u.Path)
	}
	name, svcNS := host, ns
	parts := strings.Split(strings.TrimSuffix(host, "."), ".")
	switch {
	case len(parts) == 2 || len(parts) == 3 && parts[2] == "svc" || len(parts) == 5 && strings.Join(parts[2:], ".") == "svc.cluster.local":
		name, svcNS = parts[0], parts[1]
	case len(parts) != 1:
		return nil, fmt.Errorf("bad address '%s'", host)
	}
	svc, err := objects.Get[*corev1.Service](ctx, n.st, svcNS, name)
	if err != nil {
		return nil, fmt.Errorf("bad address '%s'", host)
	}
	return n.viaService(ctx, svc, port, u.Path)
}

// byIP answers a request to a ClusterIP or a pod IP.
func (n simNet) byIP(ctx context.Context, ip netip.Addr, port int, p string) ([]byte, error) {
	svcs, _, err := objects.List[*corev1.Service](ctx, n.st, "")
	if err != nil {
		return nil, err
	}
	for _, s := range svcs {
		if s.GetSpec().GetClusterIp() == ip.String() {
			return n.viaService(ctx, s, port, p)
		}
	}
	pods, _, err := objects.List[*corev1.Pod](ctx, n.st, "")
	if err != nil {
		return nil, err
	}
	for _, pod := range pods {
		if pod.GetStatus().GetPodIp() == ip.String() && pod.GetStatus().GetPhase() == "Running" {
			return answer(pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), ip.String(), port, p), nil
		}
	}
	return nil, fmt.Errorf("can't connect to remote host (%s): No route to host", ip)
}

// viaService answers a request to svc's port from its first ready
// endpoint (in address order).
func (n simNet) viaService(ctx context.Context, svc *corev1.Service, port int, p string) ([]byte, error) {
	ns, name, ip := svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName(), svc.GetSpec().GetClusterIp()
	var sp *corev1.ServicePort
	for _, x := range svc.GetSpec().GetPorts() {
		if int(x.GetPort()) == port {
			sp = x
		}
	}
	if sp == nil {
		return nil, fmt.Errorf("can't connect to remote host (%s): Connection refused (service %s/%s has no port %d)", ip, ns, name, port)
	}
	slices, _, err := objects.List[*corev1.EndpointSlice](ctx, n.st, ns)
	if err != nil {
		return nil, err
	}
	type ep struct{ addr, pod string }
	var ready []ep
	for _, s := range slices {
		if s.GetMetadata().GetLabels()["kubernetes.io/service-name"] != name {
			continue
		}
		for _, e := range s.GetEndpoints() {
			if c := e.GetConditions(); c != nil && c.Ready != nil && !c.GetReady() || len(e.GetAddresses()) == 0 {
				continue
			}
			ready = append(ready, ep{e.GetAddresses()[0], e.GetTargetRef().GetName()})
		}
	}
	if len(ready) == 0 {
		return nil, fmt.Errorf("can't connect to remote host (%s): Connection refused (service %s/%s has no ready endpoints)", ip, ns, name)
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].addr < ready[j].addr })
	target := port
	if tp := sp.GetTargetPort(); tp != nil && tp.GetIntVal() != 0 {
		target = int(tp.GetIntVal())
	}
	return answer(ns, ready[0].pod, ready[0].addr, target, p), nil
}

// answer is what a simulated pod serves.
func answer(ns, pod, ip string, port int, p string) []byte {
	if p == "" {
		p = "/"
	}
	return fmt.Appendf(nil, "podflow-sim: pod %s/%s (%s) answered GET %s on port %d\n", ns, pod, ip, p, port)
}

package apiserver

// pods/proxy and services/proxy, as kube-apiserver serves them
// (pkg/registry/core/pod/rest ProxyREST, pkg/registry/core/service/storage
// ResourceLocation): /api/v1/namespaces/{ns}/pods/{[scheme:]name[:port]}/proxy/{path}
// and the same for services, any method, proxied by apimachinery's
// UpgradeAwareHandler (path and HTML link rewriting, upgrades) to the
// pod's IP — or a Ready endpoint's, for a Service — and nowhere else: the
// address must lie in the pod CIDR the store allocated to the pod's node.

import (
	"context"
	"crypto/tls"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/proxy"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// proxyRequest is a parsed pods/proxy or services/proxy request.
type proxyRequest struct {
	namespace string
	resource  string // "pods" or "services"
	id        string // [scheme:]name[:port], as in the URL (and as RBAC sees the name)
	path      string // what follows /proxy, "" or starting with "/"
}

// parseProxy recognises /api/v1/namespaces/{ns}/{pods|services}/{id}/proxy[/path].
func parseProxy(p string) (proxyRequest, bool) {
	rest, ok := strings.CutPrefix(p, "/api/v1/namespaces/")
	if !ok {
		return proxyRequest{}, false
	}
	parts := strings.SplitN(rest, "/", 5)
	if len(parts) < 4 || parts[3] != "proxy" || parts[0] == "" || parts[2] == "" || (parts[1] != "pods" && parts[1] != "services") {
		return proxyRequest{}, false
	}
	pr := proxyRequest{namespace: parts[0], resource: parts[1], id: parts[2]}
	if len(parts) == 5 {
		pr.path = "/" + parts[4]
	}
	return pr, true
}

// proxyVerbs are the verbs discovery lists for pods/proxy and
// services/proxy, as kube-apiserver's.
var proxyVerbs = []string{"create", "delete", "get", "patch", "update"}

// proxyVerb is the RBAC verb of a proxy request (kube's RequestInfo: an
// OPTIONS has none, so only a "*" rule allows it).
func proxyVerb(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// splitSchemeNamePort parses [scheme:]name[:port] as k8s.io/apimachinery's
// net.SplitSchemeNamePort (scheme http or https).
func splitSchemeNamePort(id string) (scheme, name, port string, ok bool) {
	parts := strings.Split(id, ":")
	switch len(parts) {
	case 1:
		name = parts[0]
	case 2:
		name, port = parts[0], parts[1]
	case 3:
		scheme, name, port = parts[0], parts[1], parts[2]
	default:
		return "", "", "", false
	}
	if name == "" || (scheme != "" && scheme != "http" && scheme != "https") {
		return "", "", "", false
	}
	return scheme, name, port, true
}

// serveProxy answers a pods/proxy or services/proxy request of user.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, user *corev1.UserInfo, pr proxyRequest) {
	scheme, name, port, ok := splitSchemeNamePort(pr.id)
	attrs := auth.Attributes{User: user, Verb: proxyVerb(r.Method), Namespace: pr.namespace, Resource: pr.resource,
		Subresource: "proxy", Name: pr.id}
	if d := s.backend.Authorize(attrs); !d.Allowed {
		writeStatus(w, auth.Forbidden(attrs, ""))
		return
	}
	if !ok {
		writeStatus(w, badRequest("invalid %s request %q", strings.TrimSuffix(pr.resource, "s"), pr.id))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	var loc *url.URL
	var st *corev1.Status
	if pr.resource == "pods" {
		loc, st = s.podLocation(ctx, pr.namespace, scheme, name, port)
	} else {
		loc, st = s.serviceLocation(ctx, pr.namespace, pr.id, scheme, name, port)
	}
	cancel()
	if st != nil {
		writeStatus(w, st)
		return
	}
	loc.Path = joinURLPath(loc.Path, pr.path)
	h := proxy.NewUpgradeAwareHandler(loc, s.proxyTransport, true, false, proxyErrors{})
	h.ServeHTTP(w, r)
}

// joinURLPath is apimachinery's net.JoinURLPath: a and b with one "/"
// between them, b's trailing "/" kept.
func joinURLPath(a, b string) string {
	if b == "" {
		return a
	}
	return strings.TrimSuffix(a, "/") + "/" + strings.TrimPrefix(b, "/")
}

// proxyErrors answers a backend that cannot be reached.
type proxyErrors struct{}

func (proxyErrors) Error(w http.ResponseWriter, _ *http.Request, err error) {
	writeStatus(w, stage.Failure(http.StatusServiceUnavailable, "ServiceUnavailable", "", "", "error trying to reach service: %v", err))
}

// newProxyTransport is kube-apiserver's proxy transport: the pods' TLS
// certificates are not verified (a proxied address is an IP, no name),
// connections time out. dial, when not nil, dials instead of a
// net.Dialer.
func newProxyTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return &http.Transport{
		DialContext:         dial,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as kube-apiserver's proxy transport
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConnsPerHost: 8,
	}
}

// podLocation is where a pod's proxy goes (kube's pod ResourceLocation):
// its IP and the port asked for, else its first container's first port,
// else none (the scheme's).
func (s *Server) podLocation(ctx context.Context, ns, scheme, name, port string) (*url.URL, *corev1.Status) {
	pod, err := objects.Get[*corev1.Pod](ctx, s.store, ns, name)
	if err != nil {
		return nil, storeStatus(err, lookupResource("v1", "pods"), name)
	}
	if port == "" {
		for _, c := range pod.GetSpec().GetContainers() {
			if len(c.GetPorts()) > 0 {
				port = strconv.Itoa(int(c.GetPorts()[0].GetContainerPort()))
				break
			}
		}
	}
	ip, st := s.podAddress(ctx, pod)
	if st != nil {
		return nil, st
	}
	loc := &url.URL{Scheme: scheme, Host: ip.String()}
	if port != "" {
		loc.Host = net.JoinHostPort(ip.String(), port)
	}
	return loc, nil
}

// podAddress is pod's IP when the proxy may go there: a global unicast
// IPv4 address (kube's check) inside the pod CIDR the store allocated to
// the pod's node — an address podflow gave a pod, never one a node
// reports for anything else.
func (s *Server) podAddress(ctx context.Context, pod *corev1.Pod) (netip.Addr, *corev1.Status) {
	notAllowed := badRequest("address not allowed")
	ip, err := netip.ParseAddr(pod.GetStatus().GetPodIp())
	if err != nil || !ip.Is4() || !ip.IsGlobalUnicast() {
		return netip.Addr{}, notAllowed
	}
	node := pod.GetSpec().GetNodeName()
	kvs, _, err := s.store.KV().List(ctx, pipeline.PodCIDRPrefix, raftstore.Stale())
	if err != nil {
		return netip.Addr{}, storeStatus(err, lookupResource("v1", "pods"), pod.GetMetadata().GetName())
	}
	for _, kv := range kvs {
		cidr, err := netip.ParsePrefix(strings.ReplaceAll(strings.TrimPrefix(kv.Key, pipeline.PodCIDRPrefix), "-", "/"))
		if err == nil && node != "" && string(kv.Value) == node && cidr.Contains(ip) {
			return ip, nil
		}
	}
	return netip.Addr{}, notAllowed
}

// serviceLocation is where a Service's proxy goes (kube's Service
// ResourceLocation): a random Ready endpoint that is a pod of the
// namespace with that address, on the endpoint port named as the service
// port asked for (by name, or by number through the Service's ports; ""
// is the unnamed port).
func (s *Server) serviceLocation(ctx context.Context, ns, id, scheme, name, portStr string) (*url.URL, *corev1.Status) {
	if n, err := strconv.ParseInt(portStr, 10, 64); err == nil {
		svc, err := objects.Get[*corev1.Service](ctx, s.store, ns, name)
		if err != nil {
			return nil, storeStatus(err, lookupResource("v1", "services"), name)
		}
		found := false
		for _, sp := range svc.GetSpec().GetPorts() {
			if int64(sp.GetPort()) == n {
				portStr, found = sp.GetName(), true
				break
			}
		}
		if !found {
			return nil, unavailable("no service port %d found for service %q", n, name)
		}
	} else if _, err := objects.Get[*corev1.Service](ctx, s.store, ns, name); err != nil {
		return nil, storeStatus(err, lookupResource("v1", "services"), name)
	}
	slices, _, err := objects.List[*corev1.EndpointSlice](ctx, s.store, ns)
	if err != nil {
		return nil, storeStatus(err, lookupResource("v1", "services"), name)
	}
	type target struct {
		ref  *corev1.ObjectReference
		ip   string
		port int32
	}
	var targets []target
	for _, sl := range slices {
		if sl.GetMetadata().GetLabels()["kubernetes.io/service-name"] != name || (sl.GetAddressType() != "" && sl.GetAddressType() != "IPv4") {
			continue
		}
		for _, p := range sl.GetPorts() {
			if p.GetName() != portStr || p.GetPort() <= 0 {
				continue
			}
			for _, ep := range sl.GetEndpoints() {
				if c := ep.GetConditions(); c != nil && c.Ready != nil && !c.GetReady() {
					continue
				}
				for _, a := range ep.GetAddresses() {
					targets = append(targets, target{ep.GetTargetRef(), a, p.GetPort()})
				}
			}
		}
	}
	if len(targets) == 0 {
		return nil, unavailable("no endpoints available for service %q", name)
	}
	start := rand.IntN(len(targets))
	for i := range targets {
		t := targets[(start+i)%len(targets)]
		// Only addresses that are pods' (kube's isValidAddress), and only
		// where podflow put them.
		if t.ref == nil || t.ref.GetKind() != "Pod" || t.ref.GetNamespace() != ns {
			continue
		}
		pod, err := objects.Get[*corev1.Pod](ctx, s.store, ns, t.ref.GetName())
		if errors.Is(err, raftstore.ErrNotFound) || (err == nil && pod.GetStatus().GetPodIp() != t.ip) {
			continue
		}
		if err != nil {
			return nil, storeStatus(err, lookupResource("v1", "pods"), t.ref.GetName())
		}
		ip, st := s.podAddress(ctx, pod)
		if st != nil {
			continue
		}
		return &url.URL{Scheme: scheme, Host: net.JoinHostPort(ip.String(), strconv.Itoa(int(t.port)))}, nil
	}
	return nil, unavailable("no endpoints available for service %q", id)
}

func unavailable(format string, args ...any) *corev1.Status {
	return stage.Failure(http.StatusServiceUnavailable, "ServiceUnavailable", "", "", format, args...)
}

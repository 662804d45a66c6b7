package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Service environment variables, as kubelet's getServiceEnvVarMap and
// envvars.FromServices make them: for every Service with a cluster IP in
// the pod's namespace (when spec.enableServiceLinks is true, the
// default) and always for default/kubernetes, <NAME>_SERVICE_HOST,
// <NAME>_SERVICE_PORT (the first port), <NAME>_SERVICE_PORT_<PORT NAME>
// for each named port, and Docker's link variables <NAME>_PORT and
// <NAME>_PORT_<port>_<PROTO>{,_PROTO,_PORT,_ADDR}. They are the
// Services known when the container starts; a container's own variables
// win, and they may be referred to with $(VAR).

// ServiceLister is the agent's view of the cluster's Services (kubelet's
// service lister). Config.Services; without one containers get no
// Service variables, as a kubelet without an apiserver.
type ServiceLister interface {
	// Services returns every Service known; it waits, within ctx, until
	// the Services have been read once, else fails.
	Services(ctx context.Context) ([]*corev1.Service, error)
}

// ErrServicesNotSynced is kubelet's refusal to make a container's
// environment before the Services have been read once.
var ErrServicesNotSynced = errors.New("services have not yet been read at least once, cannot construct envvars")

// ServiceCache is a ServiceLister fed by a watch of the store's Services:
// its Sync has the signature of the node's service syncers
// (ops/nodewire.ServiceSyncer), so the node proxy's watch feeds it too.
// Safe for concurrent use.
type ServiceCache struct {
	mu       sync.Mutex
	services []*corev1.Service
	synced   chan struct{} // closed by the first Sync
}

var _ ServiceLister = (*ServiceCache)(nil)

// NewServiceCache returns a cache that has not synced yet.
func NewServiceCache() *ServiceCache { return &ServiceCache{synced: make(chan struct{})} }

// Sync replaces the Services known (the EndpointSlices are not used); it
// never reports a change, having programmed nothing.
func (c *ServiceCache) Sync(_ context.Context, services []*corev1.Service, _ []*corev1.EndpointSlice) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.services = services
	select {
	case <-c.synced:
	default:
		close(c.synced)
	}
	return false, nil
}

// Services implements ServiceLister.
func (c *ServiceCache) Services(ctx context.Context) ([]*corev1.Service, error) {
	select {
	case <-c.synced:
	case <-ctx.Done():
		return nil, ErrServicesNotSynced
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.services, nil
}

// serviceWait bounds a worker's wait for the Services to be read once
// (a node that just started): past it the container fails
// CreateContainerConfigError and is tried again.
const serviceWait = 10 * time.Second

// serviceEnv is the pod's Service variables (none without
// Config.Services).
func (w *worker) serviceEnv(ctx context.Context) (map[string]string, error) {
	if w.d.cfg.Services == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, serviceWait)
	defer cancel()
	services, err := w.d.cfg.Services.Services(ctx)
	if err != nil {
		return nil, err
	}
	links := w.pod.GetSpec().EnableServiceLinks == nil || w.pod.GetSpec().GetEnableServiceLinks()
	return serviceEnv(services, w.pod.GetMetadata().GetNamespace(), links), nil
}

// masterServices are the default namespace's Services every pod gets
// variables for, whatever its enableServiceLinks.
var masterServices = map[string]bool{"kubernetes": true}

// serviceEnv is getServiceEnvVarMap for a pod of namespace ns.
func serviceEnv(services []*corev1.Service, ns string, links bool) map[string]string {
	chosen := map[string]*corev1.Service{}
	for _, s := range services {
		if !serviceIPSet(s) {
			continue
		}
		name, sns := s.GetMetadata().GetName(), s.GetMetadata().GetNamespace()
		switch {
		case sns == "default" && masterServices[name]:
			if _, ok := chosen[name]; !ok {
				chosen[name] = s
			}
		case sns == ns && links:
			chosen[name] = s
		}
	}
	out := map[string]string{}
	for _, s := range chosen {
		for _, kv := range fromService(s) {
			out[kv[0]] = kv[1]
		}
	}
	return out
}

// serviceIPSet is v1helper.IsServiceIPSet: a cluster IP, not "None".
func serviceIPSet(s *corev1.Service) bool {
	ip := s.GetSpec().GetClusterIp()
	return ip != "" && ip != "None"
}

// fromService is envvars.FromServices for one Service: its variables as
// name, value pairs.
func fromService(s *corev1.Service) [][2]string {
	ports := s.GetSpec().GetPorts()
	if len(ports) == 0 {
		return nil // validation requires one; nothing to say without
	}
	prefix := envName(s.GetMetadata().GetName())
	ip := s.GetSpec().GetClusterIp()
	host := prefix + "_SERVICE_HOST"
	port := prefix + "_SERVICE_PORT"
	out := [][2]string{{host, ip}, {port, strconv.Itoa(int(ports[0].GetPort()))}}
	for _, p := range ports {
		if p.GetName() != "" {
			out = append(out, [2]string{port + "_" + envName(p.GetName()), strconv.Itoa(int(p.GetPort()))})
		}
	}
	for i, p := range ports { // Docker's link variables
		proto := p.GetProtocol()
		if proto == "" {
			proto = "TCP"
		}
		lower := strings.ToLower(proto)
		url := fmt.Sprintf("%s://%s", lower, net.JoinHostPort(ip, strconv.Itoa(int(p.GetPort()))))
		if i == 0 {
			out = append(out, [2]string{prefix + "_PORT", url})
		}
		pp := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.GetPort(), strings.ToUpper(proto))
		out = append(out, [2]string{pp, url}, [2]string{pp + "_PROTO", lower},
			[2]string{pp + "_PORT", strconv.Itoa(int(p.GetPort()))}, [2]string{pp + "_ADDR", ip})
	}
	return out
}

// envName is makeEnvVariableName: upper case, "-" as "_".
func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

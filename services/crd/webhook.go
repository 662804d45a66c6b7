package crd

// The HTTPS client of conversion webhooks. The ConversionReview exchange,
// caBundle trust, timeouts and the checks of the answer are
// apiextensions-apiserver's webhook converter's (pkg/apiserver/conversion
// over k8s.io/apiserver's webhook ClientManager); what is podflow's is
// where a clientConfig.service is: a ready endpoint of the Service, read
// from the store (ServiceResolver), as kube-aggregator's endpoint
// resolver finds one. The TLS server name stays <service>.<namespace>.svc,
// which the webhook's certificate names.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/util/webhook"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// labelServiceName names the Service an EndpointSlice belongs to.
const labelServiceName = "kubernetes.io/service-name"

// ServiceResolver resolves a webhook's clientConfig.service to a ready
// endpoint of the Service (webhook.ServiceResolver): the Service's port
// (ClusterIP, NodePort or LoadBalancer) maps to its EndpointSlices' port
// of the same name, and one ready address is picked at random. It reads
// the store (linearizable), each call within Timeout.
type ServiceResolver struct {
	Store   *objects.Store
	Timeout time.Duration // 0: 5s
}

var _ webhook.ServiceResolver = ServiceResolver{}

// ResolveEndpoint implements webhook.ServiceResolver with
// kube-aggregator's answers: 503 ServiceUnavailable when the Service has
// no such port or no ready endpoint.
func (r ServiceResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	svc, err := objects.Get[*corev1.Service](ctx, r.Store, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("services %q: %w", name, err)
	}
	switch t := svc.GetSpec().GetType(); t {
	case "", "ClusterIP", "NodePort", "LoadBalancer":
	default:
		return nil, fmt.Errorf("unsupported service type %q", t)
	}
	var sp *corev1.ServicePort
	for _, p := range svc.GetSpec().GetPorts() {
		if p.GetPort() == port {
			sp = p
			break
		}
	}
	if sp == nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("no service port %d found for service %q", port, name))
	}
	sls, _, err := objects.List[*corev1.EndpointSlice](ctx, r.Store, namespace)
	if err != nil {
		return nil, err
	}
	var hosts []string
	for _, sl := range sls {
		if sl.GetMetadata().GetLabels()[labelServiceName] != name {
			continue
		}
		for _, p := range sl.GetPorts() {
			if p.GetName() != sp.GetName() || p.Port == nil {
				continue
			}
			for _, e := range sl.GetEndpoints() {
				if c := e.GetConditions(); c != nil && c.Ready != nil && !c.GetReady() {
					continue
				}
				for _, a := range e.GetAddresses() {
					hosts = append(hosts, net.JoinHostPort(a, strconv.Itoa(int(p.GetPort()))))
				}
			}
		}
	}
	if len(hosts) == 0 {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("no endpoints available for service %q", name))
	}
	return &url.URL{Scheme: "https", Host: hosts[rand.IntN(len(hosts))]}, nil
}

// NewConverters returns the converter factory of conversion None and
// Webhook, its webhooks' services resolved by r.
func NewConverters(r webhook.ServiceResolver) (Converters, error) {
	f, err := conversion.NewCRConverterFactory(r, nil)
	if err != nil {
		return nil, err
	}
	return f, nil
}

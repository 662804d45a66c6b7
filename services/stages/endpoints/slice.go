package endpoints

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// Labels Kubernetes puts on a Service's EndpointSlices.
const (
	LabelServiceName = "kubernetes.io/service-name"
	LabelManagedBy   = "endpointslice.kubernetes.io/managed-by"
	// ManagedBy is kube-controller-manager's EndpointSlice controller's
	// name, which podflow's endpoints stage takes (clients select the
	// controller's slices by it).
	ManagedBy = "endpointslice-controller.k8s.io"
	// LegacyManagedBy marked podflow's slices before it took ManagedBy;
	// such a slice is still the stage's own (rewritten, or removed with
	// its Service).
	LegacyManagedBy = "endpointslice-controller.podflow.io"
	// LabelHeadless marks the slices of a headless Service.
	LabelHeadless = "service.kubernetes.io/headless"
)

// Managed reports whether the endpoints stage manages sl.
func Managed(sl *corev1.EndpointSlice) bool {
	m := sl.GetMetadata().GetLabels()[LabelManagedBy]
	return m == ManagedBy || m == LegacyManagedBy
}

// HasSlice reports whether the endpoints stage keeps a slice for svc:
// not for an ExternalName Service, nor for one without a selector (its
// slices are its owner's, as kube-controller-manager leaves them).
func HasSlice(svc *corev1.Service) bool {
	return svc.GetSpec().GetType() != "ExternalName" && len(svc.GetSpec().GetSelector()) > 0
}

// sliceLabels are the labels of svc's slice, as kube's EndpointSlice
// controller sets them: the Service's own (but the reserved ones), the
// headless label for a Service without a cluster IP, the Service's name
// and the manager.
func sliceLabels(svc *corev1.Service) map[string]string {
	out := map[string]string{}
	for k, v := range svc.GetMetadata().GetLabels() {
		if k != LabelServiceName && k != LabelManagedBy && k != LabelHeadless {
			out[k] = v
		}
	}
	if ip := svc.GetSpec().GetClusterIp(); ip == "" || ip == "None" {
		out[LabelHeadless] = ""
	}
	out[LabelServiceName] = svc.GetMetadata().GetName()
	out[LabelManagedBy] = ManagedBy
	return out
}

// SliceName is the name of a Service's EndpointSlice, of its only one or
// of the one carrying its largest group of endpoints (SliceNames).
func SliceName(svc string) string { return svc }

// SliceNames names the slices of a Service: its largest group of
// endpoints (by their resolved ports) is in the slice named SliceName,
// every other group in one named after the Service and a hash of its
// ports, so that every replica names them alike.
func sliceNameFor(svc string, primary bool, key string) string {
	if primary {
		return SliceName(svc)
	}
	h := sha256.Sum256([]byte(key))
	return svc + "-" + hex.EncodeToString(h[:5])
}

// Selects reports whether svc's selector selects pod. A Service without a
// selector selects nothing (its endpoints are managed by hand).
func Selects(svc *corev1.Service, pod *corev1.Pod) bool {
	sel := svc.GetSpec().GetSelector()
	if len(sel) == 0 || pod.GetMetadata().GetNamespace() != svc.GetMetadata().GetNamespace() {
		return false
	}
	labels := pod.GetMetadata().GetLabels()
	for k, v := range sel {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// Ready reports whether pod is Ready (condition Ready=True) and not
// terminating.
func Ready(pod *corev1.Pod) bool {
	if pod.GetMetadata().GetDeletionTimestamp() != nil || pod.GetStatus().GetPodIp() == "" {
		return false
	}
	return podrules.IsPodReady(pod)
}

// Desired computes the EndpointSlices of svc from the pods of its
// namespace, as kube's EndpointSlice reconciler groups them: each pod its
// selector matches that is Ready (or any with an IP when the Service sets
// publishNotReadyAddresses) is an endpoint with the Service's ports
// resolved against its own container ports (a named targetPort it does
// not expose is left out of its ports, FindPort's rule), and the
// endpoints with the same resolved ports share one slice. Endpoints are
// sorted by address. No endpoint at all is one slice without endpoints
// or ports. The slices are sorted by name. The result is a pure function
// of its inputs, so that every replica and every retry computes the same
// slices.
func Desired(svc *corev1.Service, pods []*corev1.Pod) []*corev1.EndpointSlice {
	ns, name := svc.GetMetadata().GetNamespace(), svc.GetMetadata().GetName()
	newSlice := func(sliceName string, ports []*corev1.EndpointPort) *corev1.EndpointSlice {
		return &corev1.EndpointSlice{
			Metadata: &corev1.ObjectMeta{
				Name:      sliceName,
				Namespace: ns,
				Labels:    sliceLabels(svc),
				OwnerReferences: []*corev1.OwnerReference{{
					ApiVersion: "v1", Kind: "Service", Name: name, Uid: svc.GetMetadata().GetUid(),
					Controller: true, BlockOwnerDeletion: true,
				}},
			},
			AddressType: "IPv4",
			Ports:       ports,
		}
	}
	type group struct {
		key   string
		ports []*corev1.EndpointPort
		eps   []*corev1.Endpoint
	}
	groups := map[string]*group{}
	for _, pod := range pods {
		if in, _ := Membership(svc, pod); !in {
			continue
		}
		ports := endpointPorts(svc, pod)
		key := portsKey(ports)
		g := groups[key]
		if g == nil {
			g = &group{key: key, ports: ports}
			groups[key] = g
		}
		g.eps = append(g.eps, podEndpoint(svc, pod))
	}
	if len(groups) == 0 {
		return []*corev1.EndpointSlice{newSlice(SliceName(name), nil)}
	}
	sorted := make([]*group, 0, len(groups))
	for _, g := range groups {
		sort.Slice(g.eps, func(i, j int) bool { return g.eps[i].Addresses[0] < g.eps[j].Addresses[0] })
		sorted = append(sorted, g)
	}
	// The largest group keeps the Service's own name (ties: by ports).
	sort.Slice(sorted, func(i, j int) bool {
		if len(sorted[i].eps) != len(sorted[j].eps) {
			return len(sorted[i].eps) > len(sorted[j].eps)
		}
		return sorted[i].key < sorted[j].key
	})
	out := make([]*corev1.EndpointSlice, 0, len(sorted))
	for i, g := range sorted {
		sl := newSlice(sliceNameFor(name, i == 0, g.key), g.ports)
		sl.Endpoints = g.eps
		out = append(out, sl)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetMetadata().GetName() < out[j].GetMetadata().GetName() })
	return out
}

// podEndpoint is pod as an endpoint of svc, as kube's podToEndpoint
// makes it.
func podEndpoint(svc *corev1.Service, pod *corev1.Pod) *corev1.Endpoint {
	// serving is the pod's Ready condition, ready is serving and not
	// terminating, or published anyway.
	serving := podrules.IsPodReady(pod)
	terminating := pod.GetMetadata().GetDeletionTimestamp() != nil
	ready := svc.GetSpec().GetPublishNotReadyAddresses() || (serving && !terminating)
	ep := &corev1.Endpoint{
		Addresses: []string{pod.GetStatus().GetPodIp()},
		Conditions: &corev1.EndpointConditions{
			Ready: proto.Bool(ready), Serving: proto.Bool(serving), Terminating: proto.Bool(terminating),
		},
		TargetRef: podrules.EndpointRef(pod, svc.GetMetadata().GetNamespace()),
	}
	if n := pod.GetSpec().GetNodeName(); n != "" {
		ep.NodeName = proto.String(n)
	}
	// kube's ShouldSetHostname: the pod's DNS name under its subdomain's
	// (headless) Service.
	if h := pod.GetSpec().GetHostname(); h != "" && pod.GetSpec().GetSubdomain() == svc.GetMetadata().GetName() {
		ep.Hostname = proto.String(h)
	}
	return ep
}

// endpointPorts are svc's ports as pod serves them, as kube's
// getEndpointPorts resolves them: a port whose targetPort pod does not
// expose is left out. The name is set even when empty, as kube sets it:
// kube-apiserver's webhook and aggregator resolvers match a Service's
// unnamed port against a slice port named "", and skip a nil name.
func endpointPorts(svc *corev1.Service, pod *corev1.Pod) []*corev1.EndpointPort {
	var out []*corev1.EndpointPort
	for _, sp := range svc.GetSpec().GetPorts() {
		port := resolvePort(sp, pod)
		if port == 0 {
			continue
		}
		out = append(out, &corev1.EndpointPort{Name: proto.String(sp.GetName()), Port: proto.Int32(port),
			Protocol: proto.String(protocol(sp.GetProtocol())), AppProtocol: sp.AppProtocol})
	}
	return out
}

// portsKey identifies a set of resolved ports (kube's PortMapKey).
func portsKey(ports []*corev1.EndpointPort) string {
	parts := make([]string, 0, len(ports))
	for _, p := range ports {
		parts = append(parts, fmt.Sprintf("%s/%s/%d/%s", p.GetName(), p.GetProtocol(), p.GetPort(), p.GetAppProtocol()))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// Membership says whether Desired makes pod an endpoint of svc, and why
// or why not, in the words `podflow describe service` shows: "Ready", or
// "Terminating" (listed, not Ready), or a reason it is left out — its
// labels, no pod IP yet, terminating, not Ready (with the Ready
// condition's reason), a named targetPort it does not expose.
func Membership(svc *corev1.Service, pod *corev1.Pod) (endpoint bool, why string) {
	if !Selects(svc, pod) {
		return false, "labels do not match the selector"
	}
	ready := Ready(pod)
	publish := svc.GetSpec().GetPublishNotReadyAddresses()
	if !ready && !(publish && pod.GetStatus().GetPodIp() != "") {
		switch {
		case pod.GetStatus().GetPodIp() == "":
			return false, "no pod IP yet"
		case pod.GetMetadata().GetDeletionTimestamp() != nil:
			return false, "terminating"
		}
		why := "not Ready"
		for _, c := range pod.GetStatus().GetConditions() {
			if c.GetType() == "Ready" && (c.GetReason() != "" || c.GetMessage() != "") {
				why += " (" + strings.TrimSpace(c.GetReason()+" "+c.GetMessage()) + ")"
			}
		}
		return false, why
	}
	why = "Ready"
	switch {
	case pod.GetMetadata().GetDeletionTimestamp() != nil:
		why = "Terminating"
	case !ready:
		why = "not Ready (published: publishNotReadyAddresses)"
	}
	// A named targetPort the pod does not expose leaves that port out
	// of its endpoint, not the pod out of the Service (FindPort).
	for _, sp := range svc.GetSpec().GetPorts() {
		if name := sp.GetTargetPort().GetStrVal(); name != "" && resolvePort(sp, pod) == 0 {
			why += fmt.Sprintf("; exposes no port named %q", name)
		}
	}
	return true, why
}

// Equal reports whether two slices carry the same endpoints, ports and
// labels: when they do, there is nothing to write.
func Equal(a, b *corev1.EndpointSlice) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.Endpoints) != len(b.Endpoints) || len(a.Ports) != len(b.Ports) || a.AddressType != b.AddressType {
		return false
	}
	for i := range a.Endpoints {
		if !proto.Equal(a.Endpoints[i], b.Endpoints[i]) {
			return false
		}
	}
	for i := range a.Ports {
		if !proto.Equal(a.Ports[i], b.Ports[i]) {
			return false
		}
	}
	la, lb := a.GetMetadata().GetLabels(), b.GetMetadata().GetLabels()
	if len(la) != len(lb) {
		return false
	}
	for k, v := range la {
		if lb[k] != v {
			return false
		}
	}
	return true
}

func protocol(p string) string {
	if p == "" {
		return "TCP"
	}
	return p
}

// resolvePort returns the pod port a Service port targets: a number as is
// (the Service port itself when no targetPort is set), a name looked up in
// pod's container ports, then in its sidecars' (init containers that
// restart always), as kube's FindPort.
func resolvePort(sp *corev1.ServicePort, pod *corev1.Pod) int32 {
	tp := sp.GetTargetPort()
	if name := tp.GetStrVal(); name != "" {
		find := func(cs []*corev1.Container, sidecars bool) int32 {
			for _, c := range cs {
				if sidecars && c.GetRestartPolicy() != "Always" {
					continue
				}
				for _, p := range c.GetPorts() {
					if p.GetName() == name && protocol(p.GetProtocol()) == protocol(sp.GetProtocol()) {
						return p.GetContainerPort()
					}
				}
			}
			return 0
		}
		return cmp.Or(find(pod.GetSpec().GetContainers(), false), find(pod.GetSpec().GetInitContainers(), true))
	}
	if n := tp.GetIntVal(); n != 0 {
		return n
	}
	return sp.GetPort()
}

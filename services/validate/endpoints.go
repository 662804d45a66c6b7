package validate

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
)

// endpointsErrors defaults eps's port protocols to TCP (kube's
// SetDefaults_EndpointPort) and validates its subsets as kube-apiserver's
// ValidateEndpoints does: each subset has an address, every address is a
// valid IP that is not unspecified, loopback or link-local, hostnames are
// DNS labels, ports are valid and named when there are several.
func endpointsErrors(eps *corev1.Endpoints) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("subsets")
	for i, ss := range eps.GetSubsets() {
		sp := p.Index(i)
		if len(ss.GetAddresses()) == 0 && len(ss.GetNotReadyAddresses()) == 0 {
			errs = append(errs, field.Required(sp, "must specify `addresses` or `notReadyAddresses`"))
		}
		for j, a := range ss.GetAddresses() {
			errs = append(errs, endpointAddress(a, sp.Child("addresses").Index(j))...)
		}
		for j, a := range ss.GetNotReadyAddresses() {
			errs = append(errs, endpointAddress(a, sp.Child("notReadyAddresses").Index(j))...)
		}
		for j, port := range ss.GetPorts() {
			if port.Protocol == "" {
				port.Protocol = "TCP"
			}
			pp := sp.Child("ports").Index(j)
			if len(ss.GetPorts()) > 1 && port.GetName() == "" {
				errs = append(errs, field.Required(pp.Child("name"), ""))
			} else if port.GetName() != "" {
				errs = append(errs, DNS1123Label(pp.Child("name"), port.GetName())...)
			}
			for _, msg := range validation.IsValidPortNum(int(port.GetPort())) {
				errs = append(errs, field.Invalid(pp.Child("port"), port.GetPort(), msg))
			}
			if !portProtocols.Has(port.GetProtocol()) {
				errs = append(errs, field.NotSupported(pp.Child("protocol"), port.GetProtocol(), sets.List(portProtocols)))
			}
			if port.AppProtocol != nil {
				errs = append(errs, By(pp.Child("appProtocol"), port.GetAppProtocol(), validation.IsQualifiedName)...)
			}
		}
	}
	return errs
}

func endpointAddress(a *corev1.EndpointAddress, p *field.Path) field.ErrorList {
	errs := validation.IsValidIPForLegacyField(p.Child("ip"), a.GetIp(), false, nil)
	if a.GetHostname() != "" {
		errs = append(errs, DNS1123Label(p.Child("hostname"), a.GetHostname())...)
	}
	if a.NodeName != nil {
		errs = append(errs, DNS1123Subdomain(p.Child("nodeName"), a.GetNodeName())...)
	}
	return append(errs, endpointIP(a.GetIp(), p.Child("ip"))...)
}

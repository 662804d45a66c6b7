package validate

// Services as kube-apiserver takes them in: the defaulting of a decoded
// Service (k8s.io/kubernetes pkg/apis/core/v1 SetDefaults_Service), the
// registry's preparation before allocation (pkg/registry/core/service:
// patchAllocatedValues, normalizeClusterIPs, dropTypeDependentFields,
// initIPFamilyFields) and the validation (pkg/apis/core/validation
// ValidateServiceCreate / ValidateServiceUpdate), messages included.
// podflow's service CIDR is single-stack IPv4: a family or a policy that
// needs IPv6 is refused as kube-apiserver refuses it on such a cluster.

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
)

// Service types, policies and families as core/v1 names them.
const (
	ServiceTypeClusterIP    = "ClusterIP"
	ServiceTypeNodePort     = "NodePort"
	ServiceTypeLoadBalancer = "LoadBalancer"
	ServiceTypeExternalName = "ExternalName"

	ClusterIPNone = "None"

	AffinityNone     = "None"
	AffinityClientIP = "ClientIP"

	TrafficPolicyCluster = "Cluster"
	TrafficPolicyLocal   = "Local"

	IPv4 = "IPv4"
	IPv6 = "IPv6"

	SingleStack      = "SingleStack"
	PreferDualStack  = "PreferDualStack"
	RequireDualStack = "RequireDualStack"

	// DefaultAffinitySeconds and MaxAffinitySeconds bound
	// sessionAffinityConfig.clientIP.timeoutSeconds (core/v1's).
	DefaultAffinitySeconds = 10800
	MaxAffinitySeconds     = 86400
)

var (
	serviceTypes           = sets.New(ServiceTypeClusterIP, ServiceTypeNodePort, ServiceTypeLoadBalancer, ServiceTypeExternalName)
	affinityTypes          = sets.New(AffinityClientIP, AffinityNone)
	internalPolicies       = sets.New(TrafficPolicyCluster, TrafficPolicyLocal)
	externalPolicies       = sets.New(TrafficPolicyCluster, TrafficPolicyLocal)
	ipFamilies             = sets.New(IPv4, IPv6)
	ipFamilyPolicies       = sets.New(SingleStack, PreferDualStack, RequireDualStack)
	portProtocols          = sets.New("TCP", "UDP", "SCTP")
	trafficDistributions   = []string{"PreferClose", "PreferSameZone", "PreferSameNode"}
	clusterFamilies        = sets.New(IPv4) // the families podflow's service CIDR serves
	defaultClusterIPFamily = IPv4
)

// ExternallyAccessible reports whether svc is reachable from outside the
// cluster (kube's service.ExternallyAccessible): NodePort, LoadBalancer,
// or a ClusterIP Service with external IPs.
func ExternallyAccessible(svc *corev1.Service) bool {
	t := svc.GetSpec().GetType()
	return t == ServiceTypeLoadBalancer || t == ServiceTypeNodePort ||
		(t == ServiceTypeClusterIP && len(svc.GetSpec().GetExternalIps()) > 0)
}

// NeedsHealthCheck reports whether svc needs a health check node port
// (a LoadBalancer Service with externalTrafficPolicy Local).
func NeedsHealthCheck(svc *corev1.Service) bool {
	return svc.GetSpec().GetType() == ServiceTypeLoadBalancer && svc.GetSpec().GetExternalTrafficPolicy() == TrafficPolicyLocal
}

// NeedsNodePorts reports whether svc's ports get node ports allocated
// (NodePort, and LoadBalancer unless allocateLoadBalancerNodePorts is
// false).
func NeedsNodePorts(svc *corev1.Service) bool {
	switch svc.GetSpec().GetType() {
	case ServiceTypeNodePort:
		return true
	case ServiceTypeLoadBalancer:
		a := svc.GetSpec().AllocateLoadBalancerNodePorts
		return a == nil || *a
	}
	return false
}

// IsHeadless reports whether svc is headless (clusterIPs is ["None"]).
func IsHeadless(svc *corev1.Service) bool {
	ips := svc.GetSpec().GetClusterIps()
	return len(ips) == 1 && ips[0] == ClusterIPNone
}

// DefaultService fills what kube-apiserver defaults in a decoded Service:
// type ClusterIP, sessionAffinity None (ClientIP gets its timeout), each
// port's protocol TCP and targetPort its port, externalTrafficPolicy
// Cluster for an externally accessible Service, internalTrafficPolicy
// Cluster (not for ExternalName), allocateLoadBalancerNodePorts true for
// a LoadBalancer.
func DefaultService(svc *corev1.Service) {
	if svc.Spec == nil {
		svc.Spec = &corev1.ServiceSpec{}
	}
	spec := svc.Spec
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = AffinityNone
	}
	if spec.SessionAffinity == AffinityNone {
		spec.SessionAffinityConfig = nil
	}
	if cip := spec.GetSessionAffinityConfig().GetClientIp(); spec.SessionAffinity == AffinityClientIP && (cip == nil || cip.TimeoutSeconds == nil) {
		t := int32(DefaultAffinitySeconds)
		spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIp: &corev1.ClientIPConfig{TimeoutSeconds: &t}}
	}
	if spec.Type == "" {
		spec.Type = ServiceTypeClusterIP
	}
	for _, sp := range spec.Ports {
		if sp == nil {
			continue
		}
		if sp.Protocol == "" {
			sp.Protocol = "TCP"
		}
		if tp := sp.TargetPort; tp == nil || (tp.GetStrVal() == "" && tp.GetIntVal() == 0) {
			sp.TargetPort = &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: sp.Port}}
		}
	}
	if ExternallyAccessible(svc) && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = TrafficPolicyCluster
	}
	if spec.InternalTrafficPolicy == nil && (spec.Type == ServiceTypeNodePort || spec.Type == ServiceTypeLoadBalancer || spec.Type == ServiceTypeClusterIP) {
		p := TrafficPolicyCluster
		spec.InternalTrafficPolicy = &p
	}
	if spec.Type == ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		t := true
		spec.AllocateLoadBalancerNodePorts = &t
	}
}

// PrepareService readies svc, defaulted, to be created (old nil) or to
// replace old, as kube-apiserver's Service registry does before it
// allocates: the values allocated to old that svc leaves out are carried
// forward (a re-applied manifest keeps its clusterIP and node ports),
// clusterIP and clusterIPs are synced, the fields the previous type
// needed and the new one does not are dropped when the client left them
// as they were, and the IP family fields are defaulted (SingleStack,
// [IPv4]; a headless Service without a selector RequireDualStack, [IPv4,
// IPv6], as kube-apiserver defaults it). The errors are the family
// fields' that cannot be honoured on podflow's IPv4 service CIDR.
func PrepareService(svc, old *corev1.Service) field.ErrorList {
	if svc.Spec == nil {
		svc.Spec = &corev1.ServiceSpec{}
	}
	if old != nil {
		patchAllocatedValues(svc, old)
	}
	normalizeClusterIPs(svc, old)
	if old != nil {
		dropTypeDependentFields(svc, old)
	}
	return initIPFamilyFields(svc, old)
}

// patchAllocatedValues: kube's, for a client that sends back a manifest
// without the values the server allocated.
func patchAllocatedValues(svc, old *corev1.Service) {
	spec, ospec := svc.Spec, old.GetSpec()
	if ospec.GetType() != ServiceTypeExternalName && spec.Type != ServiceTypeExternalName {
		if spec.ClusterIp == "" {
			spec.ClusterIp = ospec.GetClusterIp()
		}
		if len(spec.ClusterIps) == 0 && len(ospec.GetClusterIps()) > 0 {
			spec.ClusterIps = slices.Clone(ospec.GetClusterIps())
		}
	}
	if NeedsNodePorts(old) && NeedsNodePorts(svc) {
		used := func(s *corev1.Service) sets.Set[int32] {
			u := sets.New[int32]()
			for _, p := range s.GetSpec().GetPorts() {
				if p.GetNodePort() != 0 {
					u.Insert(p.GetNodePort())
				}
			}
			return u
		}
		both := used(old).Intersection(used(svc))
		byName := map[string]int32{}
		for _, p := range ospec.GetPorts() {
			byName[p.GetName()] = p.GetNodePort()
		}
		for _, p := range spec.Ports {
			if p != nil && p.NodePort == 0 && !both.Has(byName[p.Name]) {
				p.NodePort = byName[p.Name]
			}
		}
	}
	if NeedsHealthCheck(old) && NeedsHealthCheck(svc) && spec.HealthCheckNodePort == 0 {
		spec.HealthCheckNodePort = ospec.GetHealthCheckNodePort()
	}
}

func sameClusterIPs(a, b *corev1.Service) bool {
	return a.GetSpec().GetClusterIp() == b.GetSpec().GetClusterIp() && slices.Equal(a.GetSpec().GetClusterIps(), b.GetSpec().GetClusterIps())
}

// normalizeClusterIPs: kube's, clusterIPs from clusterIP for a client
// that sets only the singular field.
func normalizeClusterIPs(svc, old *corev1.Service) {
	spec := svc.Spec
	if old == nil {
		if spec.ClusterIp != "" && len(spec.ClusterIps) == 0 {
			spec.ClusterIps = []string{spec.ClusterIp}
		}
		return
	}
	ospec := old.GetSpec()
	if len(ospec.GetClusterIps()) > 0 && len(spec.ClusterIps) == 0 && ospec.GetClusterIp() == spec.ClusterIp {
		spec.ClusterIps = slices.Clone(ospec.GetClusterIps())
	}
	if ospec.GetClusterIp() != spec.ClusterIp {
		if ospec.GetClusterIp() != "" && spec.ClusterIp == "" {
			if sameClusterIPs(old, svc) {
				spec.ClusterIps = nil
			}
		} else if sameClusterIPs(old, svc) {
			spec.ClusterIps = []string{spec.ClusterIp}
		}
	}
}

// dropTypeDependentFields: kube's, on update only.
func dropTypeDependentFields(svc, old *corev1.Service) {
	spec, ospec := svc.Spec, old.GetSpec()
	if ospec.GetType() != ServiceTypeExternalName && spec.Type == ServiceTypeExternalName {
		if sameClusterIPs(old, svc) {
			spec.ClusterIp, spec.ClusterIps = "", nil
		}
		if slices.Equal(ospec.GetIpFamilies(), spec.IpFamilies) {
			spec.IpFamilies = nil
		}
		if ospec.GetIpFamilyPolicy() == spec.GetIpFamilyPolicy() {
			spec.IpFamilyPolicy = nil
		}
	}
	// kube's needsNodePort here counts every LoadBalancer.
	hasNodePorts := func(s *corev1.Service) bool {
		t := s.GetSpec().GetType()
		return t == ServiceTypeNodePort || t == ServiceTypeLoadBalancer
	}
	if hasNodePorts(old) && !hasNodePorts(svc) && sameNodePorts(old, svc) {
		for _, p := range spec.Ports {
			if p != nil {
				p.NodePort = 0
			}
		}
	}
	if NeedsHealthCheck(old) && !NeedsHealthCheck(svc) && ospec.GetHealthCheckNodePort() == spec.HealthCheckNodePort {
		spec.HealthCheckNodePort = 0
	}
	if ospec.GetType() == ServiceTypeLoadBalancer && spec.Type != ServiceTypeLoadBalancer &&
		spec.AllocateLoadBalancerNodePorts != nil && ospec.AllocateLoadBalancerNodePorts != nil &&
		*spec.AllocateLoadBalancerNodePorts == *ospec.AllocateLoadBalancerNodePorts {
		spec.AllocateLoadBalancerNodePorts = nil
	}
	if ospec.GetType() == ServiceTypeLoadBalancer && spec.Type != ServiceTypeLoadBalancer &&
		((spec.LoadBalancerClass == nil && ospec.LoadBalancerClass == nil) ||
			(spec.LoadBalancerClass != nil && ospec.LoadBalancerClass != nil && *spec.LoadBalancerClass == *ospec.LoadBalancerClass)) {
		spec.LoadBalancerClass = nil
	}
	if ExternallyAccessible(old) && !ExternallyAccessible(svc) && ospec.GetExternalTrafficPolicy() == spec.ExternalTrafficPolicy {
		spec.ExternalTrafficPolicy = ""
	}
}

func sameNodePorts(a, b *corev1.Service) bool {
	set := func(s *corev1.Service) sets.Set[int32] {
		out := sets.New[int32]()
		for _, p := range s.GetSpec().GetPorts() {
			if p.GetNodePort() != 0 {
				out.Insert(p.GetNodePort())
			}
		}
		return out
	}
	return set(a).Equal(set(b))
}

// familyOf is the family of a valid IP, "" for anything else.
func familyOf(ip string) string {
	a, err := netip.ParseAddr(ip)
	switch {
	case err != nil:
		return ""
	case a.Is4() || a.Is4In6():
		return IPv4
	}
	return IPv6
}

// initIPFamilyFields: kube's allocator's, for a cluster whose one family
// is IPv4.
func initIPFamilyFields(svc, old *corev1.Service) field.ErrorList {
	spec := svc.Spec
	if spec.Type == ServiceTypeExternalName {
		return nil
	}
	policyPath := field.NewPath("spec", "ipFamilyPolicy")
	if spec.IpFamilyPolicy == nil {
		var p string
		switch {
		case old != nil && old.GetSpec().IpFamilyPolicy != nil:
			p = old.GetSpec().GetIpFamilyPolicy()
		case spec.ClusterIp == ClusterIPNone && len(spec.Selector) == 0:
			p = RequireDualStack
		default:
			p = SingleStack
		}
		spec.IpFamilyPolicy = &p
	}
	// A PreferDualStack Service that keeps its IPs and families as they
	// were is left alone (kube's isMatchingPreferDualStackClusterIPFields).
	if old != nil && spec.GetIpFamilyPolicy() == PreferDualStack && old.GetSpec().GetIpFamilyPolicy() == PreferDualStack &&
		sameClusterIPs(old, svc) && slices.Equal(old.GetSpec().GetIpFamilies(), spec.IpFamilies) {
		return nil
	}
	if el := clusterIPsRelatedFields(svc, old); len(el) != 0 {
		return el
	}
	var el field.ErrorList
	if old != nil {
		if spec.GetIpFamilyPolicy() == SingleStack {
			if sameClusterIPs(old, svc) && len(spec.ClusterIps) > 1 {
				spec.ClusterIps = spec.ClusterIps[:1]
			}
			if slices.Equal(old.GetSpec().GetIpFamilies(), spec.IpFamilies) && len(spec.IpFamilies) > 1 {
				spec.IpFamilies = spec.IpFamilies[:1]
			}
		} else {
			if len(spec.ClusterIps) < len(old.GetSpec().GetClusterIps()) {
				el = append(el, field.Invalid(policyPath, spec.IpFamilyPolicy, "must be 'SingleStack' to release the secondary cluster IP"))
			}
			if len(spec.IpFamilies) < len(old.GetSpec().GetIpFamilies()) {
				el = append(el, field.Invalid(policyPath, spec.IpFamilyPolicy, "must be 'SingleStack' to release the secondary IP family"))
			}
		}
	}
	if spec.GetIpFamilyPolicy() == SingleStack {
		if len(spec.ClusterIps) == 2 {
			el = append(el, field.Invalid(policyPath, spec.IpFamilyPolicy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"))
		}
		if len(spec.IpFamilies) == 2 {
			el = append(el, field.Invalid(policyPath, spec.IpFamilyPolicy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"))
		}
	}
	for i, ip := range spec.ClusterIps {
		if ip == ClusterIPNone {
			break
		}
		fam := familyOf(ip)
		if i >= len(spec.IpFamilies) {
			if !clusterFamilies.Has(fam) {
				el = append(el, field.Invalid(field.NewPath("spec", "clusterIPs").Index(i), spec.ClusterIps, fmt.Sprintf("%s is not configured on this cluster", fam)))
			} else {
				spec.IpFamilies = append(spec.IpFamilies, fam)
			}
		}
	}
	if len(el) > 0 {
		return el
	}
	if spec.ClusterIp == ClusterIPNone && len(spec.Selector) == 0 {
		if len(spec.IpFamilies) == 0 {
			spec.IpFamilies = []string{defaultClusterIPFamily}
		}
		if len(spec.IpFamilies) < 2 && spec.GetIpFamilyPolicy() != SingleStack {
			if spec.IpFamilies[0] == IPv4 {
				spec.IpFamilies = append(spec.IpFamilies, IPv6)
			} else {
				spec.IpFamilies = append(spec.IpFamilies, IPv4)
			}
		}
		return nil
	}
	if spec.GetIpFamilyPolicy() == RequireDualStack && clusterFamilies.Len() < 2 {
		el = append(el, field.Invalid(policyPath, spec.IpFamilyPolicy, "this cluster is not configured for dual-stack services"))
	}
	for i, fam := range spec.IpFamilies {
		if !clusterFamilies.Has(fam) {
			el = append(el, field.Invalid(field.NewPath("spec", "ipFamilies").Index(i), fam, "not configured on this cluster"))
		}
	}
	if len(el) > 0 {
		return el
	}
	if len(spec.IpFamilies) == 0 {
		spec.IpFamilies = []string{defaultClusterIPFamily}
	}
	return nil
}

// ServiceErrors validates svc (old nil: a create; else the update of old)
// as kube-apiserver's ValidateServiceCreate / ValidateServiceUpdate do,
// metadata aside (Object checks the name and namespace).
func ServiceErrors(svc, old *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	if old != nil {
		errs = append(errs, upgradeDowngradeClusterIPs(old, svc)...)
		errs = append(errs, upgradeDowngradeIPFamilies(old, svc)...)
		errs = append(errs, loadBalancerClassField(old, svc)...)
		if NeedsHealthCheck(old) && NeedsHealthCheck(svc) && svc.GetSpec().GetHealthCheckNodePort() != old.GetSpec().GetHealthCheckNodePort() {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "healthCheckNodePort"), "field is immutable"))
		}
	}
	return append(errs, serviceSpec(svc, old)...)
}

// Service defaults and prepares svc (see DefaultService, PrepareService)
// and validates it; it returns nil when svc may be stored, else the 422
// Invalid Status kube-apiserver answers, e.g.
//
//	Service "web" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive
func Service(svc, old *corev1.Service) *corev1.Status {
	DefaultService(svc)
	name := svc.GetMetadata().GetName()
	if errs := PrepareService(svc, old); len(errs) > 0 {
		return InvalidStatus("Service", name, errs)
	}
	if errs := ServiceErrors(svc, old); len(errs) > 0 {
		return InvalidStatus("Service", name, errs)
	}
	return nil
}

func serviceSpec(svc, old *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	spec := svc.GetSpec()
	specPath := field.NewPath("spec")
	headless := IsHeadless(svc)
	if len(spec.GetPorts()) == 0 && !headless && spec.GetType() != ServiceTypeExternalName {
		errs = append(errs, field.Required(specPath.Child("ports"), ""))
	}
	switch spec.GetType() {
	case ServiceTypeLoadBalancer:
		if headless {
			errs = append(errs, field.Invalid(specPath.Child("clusterIPs").Index(0), spec.GetClusterIps()[0], "may not be set to 'None' for LoadBalancer services"))
		}
	case ServiceTypeNodePort:
		if headless {
			errs = append(errs, field.Invalid(specPath.Child("clusterIPs").Index(0), spec.GetClusterIps()[0], "may not be set to 'None' for NodePort services"))
		}
	case ServiceTypeExternalName:
		if len(spec.GetClusterIps()) > 0 {
			errs = append(errs, field.Forbidden(specPath.Child("clusterIPs"), "may not be set for ExternalName services"))
		}
		if len(spec.GetIpFamilies()) > 0 {
			errs = append(errs, field.Forbidden(specPath.Child("ipFamilies"), "may not be set for ExternalName services"))
		}
		if spec.IpFamilyPolicy != nil {
			errs = append(errs, field.Forbidden(specPath.Child("ipFamilyPolicy"), "may not be set for ExternalName services"))
		}
		if cname := strings.TrimSuffix(spec.GetExternalName(), "."); cname != "" {
			errs = append(errs, DNS1123Subdomain(specPath.Child("externalName"), cname)...)
		} else {
			errs = append(errs, field.Required(specPath.Child("externalName"), ""))
		}
	}
	names := sets.New[string]()
	for i, sp := range spec.GetPorts() {
		errs = append(errs, servicePort(sp, len(spec.GetPorts()) > 1, names, specPath.Child("ports").Index(i))...)
	}
	if spec.GetSelector() != nil {
		errs = append(errs, metav1validation.ValidateLabels(spec.GetSelector(), specPath.Child("selector"))...)
	}
	switch aff := spec.GetSessionAffinity(); {
	case aff == "":
		errs = append(errs, field.Required(specPath.Child("sessionAffinity"), ""))
	case !affinityTypes.Has(aff):
		errs = append(errs, field.NotSupported(specPath.Child("sessionAffinity"), aff, sets.List(affinityTypes)))
	case aff == AffinityClientIP:
		errs = append(errs, clientIPAffinity(spec.GetSessionAffinityConfig(), specPath.Child("sessionAffinityConfig"))...)
	case aff == AffinityNone && spec.GetSessionAffinityConfig() != nil:
		errs = append(errs, field.Forbidden(specPath.Child("sessionAffinityConfig"), fmt.Sprintf("must not be set when session affinity is %s", AffinityNone)))
	}
	errs = append(errs, clusterIPsRelatedFields(svc, old)...)
	var oldExternal []string
	if old != nil {
		oldExternal = old.GetSpec().GetExternalIps()
	}
	for i, ip := range spec.GetExternalIps() {
		p := specPath.Child("externalIPs").Index(i)
		if e := validation.IsValidIPForLegacyField(p, ip, false, oldExternal); len(e) != 0 {
			errs = append(errs, e...)
		} else {
			errs = append(errs, endpointIP(ip, p)...)
		}
	}
	switch t := spec.GetType(); {
	case t == "":
		errs = append(errs, field.Required(specPath.Child("type"), ""))
	case !serviceTypes.Has(t):
		errs = append(errs, field.NotSupported(specPath.Child("type"), t, sets.List(serviceTypes)))
	}
	if spec.GetType() == ServiceTypeClusterIP {
		for i, sp := range spec.GetPorts() {
			if sp.GetNodePort() != 0 {
				errs = append(errs, field.Forbidden(specPath.Child("ports").Index(i).Child("nodePort"), "may not be used when `type` is 'ClusterIP'"))
			}
		}
	}
	type protoPort struct {
		protocol string
		port     int32
	}
	nodePorts := map[protoPort]bool{}
	for i, sp := range spec.GetPorts() {
		if sp.GetNodePort() == 0 {
			continue
		}
		key := protoPort{sp.GetProtocol(), sp.GetNodePort()}
		if nodePorts[key] {
			errs = append(errs, field.Duplicate(specPath.Child("ports").Index(i).Child("nodePort"), sp.GetNodePort()))
		}
		nodePorts[key] = true
	}
	ports := map[protoPort]bool{}
	for i, sp := range spec.GetPorts() {
		key := protoPort{sp.GetProtocol(), sp.GetPort()}
		if ports[key] {
			// kube prints its core.ServicePort key with only these two set.
			errs = append(errs, field.Duplicate(specPath.Child("ports").Index(i), servicePortKey{Port: key.port, Protocol: key.protocol}))
		}
		ports[key] = true
	}
	if len(spec.GetLoadBalancerSourceRanges()) > 0 {
		p := specPath.Child("LoadBalancerSourceRanges") // sic, kube's path
		if spec.GetType() != ServiceTypeLoadBalancer {
			errs = append(errs, field.Forbidden(p, "may only be used when `type` is 'LoadBalancer'"))
		}
		var existing []string
		for _, v := range old.GetSpec().GetLoadBalancerSourceRanges() {
			existing = append(existing, strings.TrimSpace(v))
		}
		for i, v := range spec.GetLoadBalancerSourceRanges() {
			errs = append(errs, validation.IsValidCIDRForLegacyField(p.Index(i), strings.TrimSpace(v), false, existing)...)
		}
	}
	if spec.AllocateLoadBalancerNodePorts != nil && spec.GetType() != ServiceTypeLoadBalancer {
		errs = append(errs, field.Forbidden(specPath.Child("allocateLoadBalancerNodePorts"), "may only be used when `type` is 'LoadBalancer'"))
	}
	if spec.GetType() == ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		errs = append(errs, field.Required(field.NewPath("allocateLoadBalancerNodePorts"), ""))
	}
	errs = append(errs, loadBalancerClassField(nil, svc)...)
	errs = append(errs, externalTrafficPolicy(svc)...)
	if spec.InternalTrafficPolicy == nil {
		if t := spec.GetType(); t == ServiceTypeNodePort || t == ServiceTypeLoadBalancer || t == ServiceTypeClusterIP {
			errs = append(errs, field.Required(specPath.Child("internalTrafficPolicy"), ""))
		}
	} else if !internalPolicies.Has(spec.GetInternalTrafficPolicy()) {
		errs = append(errs, field.NotSupported(specPath.Child("internalTrafficPolicy"), spec.GetInternalTrafficPolicy(), sets.List(internalPolicies)))
	}
	if spec.TrafficDistribution != nil && !slices.Contains(trafficDistributions, spec.GetTrafficDistribution()) {
		errs = append(errs, field.NotSupported(specPath.Child("trafficDistribution"), spec.GetTrafficDistribution(), trafficDistributions))
	}
	return errs
}

// servicePortKey renders as kube's internal core.ServicePort (no JSON
// tags) does in a Duplicate error, with only protocol and port set:
// {"Name":"","Protocol":"TCP","AppProtocol":null,"Port":80,"TargetPort":0,"NodePort":0}.
type servicePortKey struct {
	Name        string
	Protocol    string
	AppProtocol *string
	Port        int32
	TargetPort  int32
	NodePort    int32
}

func servicePort(sp *corev1.ServicePort, requireName bool, names sets.Set[string], p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if requireName && sp.GetName() == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else if sp.GetName() != "" {
		errs = append(errs, DNS1123Label(p.Child("name"), sp.GetName())...)
		if names.Has(sp.GetName()) {
			errs = append(errs, field.Duplicate(p.Child("name"), sp.GetName()))
		} else {
			names.Insert(sp.GetName())
		}
	}
	for _, msg := range validation.IsValidPortNum(int(sp.GetPort())) {
		errs = append(errs, field.Invalid(p.Child("port"), sp.GetPort(), msg))
	}
	switch {
	case sp.GetProtocol() == "":
		errs = append(errs, field.Required(p.Child("protocol"), ""))
	case !portProtocols.Has(sp.GetProtocol()):
		errs = append(errs, field.NotSupported(p.Child("protocol"), sp.GetProtocol(), sets.List(portProtocols)))
	}
	errs = append(errs, PortNumOrName(sp.GetTargetPort(), p.Child("targetPort"))...)
	if sp.AppProtocol != nil {
		errs = append(errs, By(p.Child("appProtocol"), sp.GetAppProtocol(), validation.IsQualifiedName)...)
	}
	return errs
}

// PortNumOrName validates an IntOrString port (kube's
// ValidatePortNumOrName): a number in 1..65535 or an IANA service name.
func PortNumOrName(port *corev1.IntOrString, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s, ok := port.GetValue().(*corev1.IntOrString_StrVal); ok {
		for _, msg := range validation.IsValidPortName(s.StrVal) {
			errs = append(errs, field.Invalid(p, s.StrVal, msg))
		}
		return errs
	}
	for _, msg := range validation.IsValidPortNum(int(port.GetIntVal())) {
		errs = append(errs, field.Invalid(p, int(port.GetIntVal()), msg))
	}
	return errs
}

func clientIPAffinity(cfg *corev1.SessionAffinityConfig, p *field.Path) field.ErrorList {
	why := fmt.Sprintf("when session affinity type is %s", AffinityClientIP)
	switch {
	case cfg == nil:
		return field.ErrorList{field.Required(p, why)}
	case cfg.ClientIp == nil:
		return field.ErrorList{field.Required(p.Child("clientIP"), why)}
	case cfg.ClientIp.TimeoutSeconds == nil:
		return field.ErrorList{field.Required(p.Child("clientIP").Child("timeoutSeconds"), why)}
	}
	if t := cfg.ClientIp.GetTimeoutSeconds(); t <= 0 || t > MaxAffinitySeconds {
		return field.ErrorList{field.Invalid(p.Child("clientIP").Child("timeoutSeconds"), t, fmt.Sprintf("must be greater than 0 and less than %d", MaxAffinitySeconds))}
	}
	return nil
}

// endpointIP: kube's ValidateEndpointIP.
func endpointIP(ip string, p *field.Path) field.ErrorList {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return field.ErrorList{field.Invalid(p, ip, "must be a valid IP address")}
	}
	a = a.Unmap()
	var errs field.ErrorList
	if a.IsUnspecified() {
		errs = append(errs, field.Invalid(p, ip, fmt.Sprintf("may not be unspecified (%v)", ip)))
	}
	if a.IsLoopback() {
		errs = append(errs, field.Invalid(p, ip, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	}
	if a.IsLinkLocalUnicast() {
		errs = append(errs, field.Invalid(p, ip, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	}
	if a.IsLinkLocalMulticast() {
		errs = append(errs, field.Invalid(p, ip, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
	}
	return errs
}

func externalTrafficPolicy(svc *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	spec := svc.GetSpec()
	p := field.NewPath("spec")
	if !ExternallyAccessible(svc) {
		if spec.GetExternalTrafficPolicy() != "" {
			errs = append(errs, field.Invalid(p.Child("externalTrafficPolicy"), spec.GetExternalTrafficPolicy(), "may only be set for externally-accessible services"))
		}
	} else if spec.GetExternalTrafficPolicy() == "" {
		errs = append(errs, field.Required(p.Child("externalTrafficPolicy"), ""))
	} else if !externalPolicies.Has(spec.GetExternalTrafficPolicy()) {
		errs = append(errs, field.NotSupported(p.Child("externalTrafficPolicy"), spec.GetExternalTrafficPolicy(), sets.List(externalPolicies)))
	}
	if !NeedsHealthCheck(svc) {
		if spec.GetHealthCheckNodePort() != 0 {
			errs = append(errs, field.Invalid(p.Child("healthCheckNodePort"), spec.GetHealthCheckNodePort(), "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		}
	} else if spec.GetHealthCheckNodePort() == 0 {
		errs = append(errs, field.Required(p.Child("healthCheckNodePort"), ""))
	} else {
		for _, msg := range validation.IsValidPortNum(int(spec.GetHealthCheckNodePort())) {
			errs = append(errs, field.Invalid(p.Child("healthCheckNodePort"), spec.GetHealthCheckNodePort(), msg))
		}
	}
	return errs
}

func loadBalancerClassField(old, svc *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec", "loadBalancerClass")
	spec := svc.GetSpec()
	if old != nil && old.GetSpec().GetType() == ServiceTypeLoadBalancer && spec.GetType() == ServiceTypeLoadBalancer {
		o, n := old.GetSpec().LoadBalancerClass, spec.LoadBalancerClass
		if (o == nil) != (n == nil) || (o != nil && *o != *n) {
			errs = append(errs, field.Invalid(p, n, "may not change once set"))
		}
	}
	if spec.GetType() == ServiceTypeLoadBalancer {
		if spec.LoadBalancerClass != nil {
			errs = append(errs, By(p, spec.GetLoadBalancerClass(), validation.IsQualifiedName)...)
		}
	} else if spec.LoadBalancerClass != nil {
		errs = append(errs, field.Forbidden(p, "may only be used when `type` is 'LoadBalancer'"))
	}
	return errs
}

// clusterIPsRelatedFields: kube's ValidateServiceClusterIPsRelatedFields.
func clusterIPsRelatedFields(svc, old *corev1.Service) field.ErrorList {
	spec := svc.GetSpec()
	if spec.GetType() == ServiceTypeExternalName {
		return nil
	}
	var errs field.ErrorList
	specPath := field.NewPath("spec")
	ipsPath := specPath.Child("clusterIPs")
	if spec.GetClusterIp() != "" {
		if len(spec.GetClusterIps()) == 0 {
			errs = append(errs, field.Required(ipsPath, ""))
		} else if spec.GetClusterIps()[0] != spec.GetClusterIp() {
			errs = append(errs, field.Invalid(ipsPath, spec.GetClusterIps(), "first value must match `clusterIP`"))
		}
	} else if len(spec.GetClusterIps()) != 0 {
		errs = append(errs, field.Invalid(ipsPath, spec.GetClusterIps(), "must be empty when `clusterIP` is not specified"))
	}
	seen := sets.New[string]()
	for i, fam := range spec.GetIpFamilies() {
		if !ipFamilies.Has(fam) {
			errs = append(errs, field.NotSupported(specPath.Child("ipFamilies").Index(i), fam, sets.List(ipFamilies)))
		}
		if seen.Has(fam) {
			errs = append(errs, field.Duplicate(specPath.Child("ipFamilies").Index(i), fam))
		}
		seen.Insert(fam)
	}
	if spec.IpFamilyPolicy != nil && !ipFamilyPolicies.Has(spec.GetIpFamilyPolicy()) {
		errs = append(errs, field.NotSupported(specPath.Child("ipFamilyPolicy"), spec.GetIpFamilyPolicy(), sets.List(ipFamilyPolicies)))
	}
	invalid := false
	for i, ip := range spec.GetClusterIps() {
		if i == 0 && ip == ClusterIPNone {
			if len(spec.GetClusterIps()) > 1 {
				invalid = true
				errs = append(errs, field.Invalid(ipsPath, spec.GetClusterIps(), "'None' must be the first and only value"))
			}
			continue
		}
		e := validation.IsValidIPForLegacyField(ipsPath.Index(i), ip, false, old.GetSpec().GetClusterIps())
		invalid = invalid || len(e) != 0
		errs = append(errs, e...)
	}
	if len(spec.GetClusterIps()) > 2 {
		errs = append(errs, field.Invalid(ipsPath, spec.GetClusterIps(), "may only hold up to 2 values"))
	}
	if invalid {
		return errs
	}
	if ips := spec.GetClusterIps(); len(ips) > 1 && (len(ips) != 2 || familyOf(ips[0]) == familyOf(ips[1])) {
		errs = append(errs, field.Invalid(ipsPath, ips, "may specify no more than one IP for each IP family"))
	}
	if !IsHeadless(svc) && len(spec.GetClusterIps()) > 0 && len(spec.GetIpFamilies()) > 0 {
		for i, ip := range spec.GetClusterIps() {
			if i > len(spec.GetIpFamilies())-1 {
				break
			}
			if spec.GetIpFamilies()[i] == IPv4 && familyOf(ip) == IPv6 {
				errs = append(errs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an IPv4 value as indicated by `ipFamilies[%v]`", i)))
			}
			if spec.GetIpFamilies()[i] == IPv6 && familyOf(ip) != IPv6 {
				errs = append(errs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an IPv6 value as indicated by `ipFamilies[%v]`", i)))
			}
		}
	}
	return errs
}

func upgradeDowngradeClusterIPs(old, svc *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	if svc.GetSpec().GetType() == ServiceTypeExternalName || old.GetSpec().GetType() == ServiceTypeExternalName {
		return nil
	}
	if IsHeadless(old) && IsHeadless(svc) {
		return nil
	}
	oips, ips := old.GetSpec().GetClusterIps(), svc.GetSpec().GetClusterIps()
	p := field.NewPath("spec", "clusterIPs")
	switch {
	case len(oips) == len(ips):
		for i, ip := range oips {
			if ip != ips[i] {
				errs = append(errs, field.Invalid(p.Index(i), ips, "may not change once set"))
			}
		}
	case len(oips) > len(ips):
		if len(ips) == 0 {
			errs = append(errs, field.Invalid(p.Index(0), ips, "primary clusterIP can not be unset"))
		}
		if len(oips) > 0 && len(ips) > 0 && ips[0] != oips[0] {
			errs = append(errs, field.Invalid(p.Index(0), ips, "may not change once set"))
		}
		if len(ips) == 1 && svc.GetSpec().GetIpFamilyPolicy() != SingleStack {
			errs = append(errs, field.Invalid(field.NewPath("spec", "ipFamilyPolicy"), svc.GetSpec().IpFamilyPolicy, "must be set to 'SingleStack' when releasing the secondary clusterIP"))
		}
	default:
		if len(oips) > 0 && ips[0] != oips[0] {
			errs = append(errs, field.Invalid(p.Index(0), ips, "may not change once set"))
		}
	}
	return errs
}

func upgradeDowngradeIPFamilies(old, svc *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	if svc.GetSpec().GetType() == ServiceTypeExternalName || old.GetSpec().GetType() == ServiceTypeExternalName {
		return nil
	}
	if IsHeadless(old) != IsHeadless(svc) || IsHeadless(svc) {
		return nil
	}
	ofams, fams := old.GetSpec().GetIpFamilies(), svc.GetSpec().GetIpFamilies()
	p := field.NewPath("spec", "ipFamilies")
	switch {
	case len(ofams) == len(fams):
		for i, f := range ofams {
			if f != fams[i] {
				errs = append(errs, field.Invalid(p.Index(0), fams, "may not change once set"))
			}
		}
	case len(ofams) > len(fams):
		if len(svc.GetSpec().GetClusterIps()) == 0 {
			errs = append(errs, field.Invalid(p.Index(0), fams, "primary ipFamily can not be unset"))
		}
		if len(fams) > 0 && fams[0] != ofams[0] {
			errs = append(errs, field.Invalid(p.Index(0), svc.GetSpec().GetClusterIps(), "may not change once set"))
		}
		if len(fams) == 1 && svc.GetSpec().GetIpFamilyPolicy() != SingleStack {
			errs = append(errs, field.Invalid(field.NewPath("spec", "ipFamilyPolicy"), svc.GetSpec().IpFamilyPolicy, "must be set to 'SingleStack' when releasing the secondary ipFamily"))
		}
	default:
		if len(ofams) > 0 && len(fams) > 0 && fams[0] != ofams[0] {
			errs = append(errs, field.Invalid(p.Index(0), svc.GetSpec().GetClusterIps(), "may not change once set"))
		}
	}
	return errs
}

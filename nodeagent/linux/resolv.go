package linux

import (
	"bufio"
	"cmp"
	"net/netip"
	"os"
	"slices"
	"strings"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Kubernetes' dnsPolicy values.
const (
	DNSClusterFirst            = "ClusterFirst"
	DNSClusterFirstWithHostNet = "ClusterFirstWithHostNet"
	DNSDefault                 = "Default"
	DNSNone                    = "None"
)

// Kubelet's limits on a pod's resolv.conf (validation.MaxDNSNameservers,
// MaxDNSSearchPaths).
const (
	maxNameservers = 3
	maxSearches    = 32
)

// resolvConfig is a resolv.conf as data.
type resolvConfig struct {
	nameservers []string
	searches    []string
	options     []string // "ndots:5", "edns0"
}

// resolvFile is the pod's /etc/resolv.conf, as kubelet's dns configurer
// writes it for the pod's dnsPolicy:
//
//   - ClusterFirst (the default): the cluster DNS (Config.ClusterDNS),
//     search <ns>.svc.<domain> svc.<domain> <domain>, options ndots:5. A
//     hostNetwork pod gets Default instead, as in Kubernetes, unless its
//     policy is ClusterFirstWithHostNet. With no cluster DNS configured,
//     ClusterFirst is Default too (kubelet's fallback).
//   - Default: the node's resolv.conf (Config.ResolvConf). For a pod with
//     a network namespace of its own, only loopback nameservers are kept:
//     the node's other nameservers may be addresses of this machine (a
//     local resolver answering on the host's LAN address), which a pod
//     reaches through the host's local routing table, and such a resolver
//     may forward off the machine. Pods' traffic never leaves the machine.
//   - None: only dnsConfig.
//
// dnsConfig is merged into every policy as kubelet does: its nameservers
// and searches appended (duplicates dropped), its options replacing those
// of the same name; then the lists are cut to kubelet's limits.
func (r *Runtime) resolvFile(pd *corev1.Pod) []byte {
	path, domain := cmp.Or(r.cfg.ResolvConf, "/etc/resolv.conf"), r.clusterDomain()
	hostFile, _ := os.ReadFile(path) // none: no nameserver, as kubelet with --resolv-conf=""
	return resolvConfFor(pd, r.cfg.ClusterDNS, domain, hostFile).render()
}

// clusterDomain is Config.ClusterDomain, cluster.local when unset.
func (r *Runtime) clusterDomain() string { return cmp.Or(r.cfg.ClusterDomain, "cluster.local") }

func resolvConfFor(pd *corev1.Pod, clusterDNS []string, domain string, hostFile []byte) resolvConfig {
	spec := pd.GetSpec()
	policy := spec.GetDnsPolicy()
	if policy == "" {
		policy = DNSClusterFirst
	}
	if policy == DNSClusterFirst && spec.GetHostNetwork() {
		policy = DNSDefault
	}
	if (policy == DNSClusterFirst || policy == DNSClusterFirstWithHostNet) && len(clusterDNS) == 0 {
		policy = DNSDefault
	}
	var rc resolvConfig
	switch policy {
	case DNSClusterFirst, DNSClusterFirstWithHostNet:
		ns := pd.GetMetadata().GetNamespace()
		if ns == "" {
			ns = "default"
		}
		rc = resolvConfig{
			nameservers: slices.Clone(clusterDNS),
			searches:    []string{ns + ".svc." + domain, "svc." + domain, domain},
			options:     []string{"ndots:5"},
		}
	case DNSDefault:
		rc = parseResolvConf(hostFile)
		if !spec.GetHostNetwork() {
			rc.nameservers = slices.DeleteFunc(rc.nameservers, func(s string) bool {
				a, err := netip.ParseAddr(s)
				return err != nil || !a.IsLoopback()
			})
		}
	}
	if dc := spec.GetDnsConfig(); dc != nil {
		rc.nameservers = appendNew(rc.nameservers, dc.GetNameservers()...)
		rc.searches = appendNew(rc.searches, dc.GetSearches()...)
		for _, o := range dc.GetOptions() {
			opt := o.GetName()
			if o.Value != nil {
				opt += ":" + o.GetValue()
			}
			rc.options = slices.DeleteFunc(rc.options, func(s string) bool {
				name, _, _ := strings.Cut(s, ":")
				return name == o.GetName()
			})
			rc.options = append(rc.options, opt)
		}
	}
	if len(rc.nameservers) > maxNameservers {
		rc.nameservers = rc.nameservers[:maxNameservers]
	}
	if len(rc.searches) > maxSearches {
		rc.searches = rc.searches[:maxSearches]
	}
	return rc
}

// appendNew appends the items of add that list does not hold yet.
func appendNew(list []string, add ...string) []string {
	for _, s := range add {
		if s != "" && !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}

// parseResolvConf reads the nameserver, search (and domain) and options
// lines of a resolv.conf.
func parseResolvConf(b []byte) resolvConfig {
	var rc resolvConfig
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			rc.nameservers = append(rc.nameservers, f[1])
		case "search", "domain": // the last one wins, as in the resolver
			rc.searches = slices.Clone(f[1:])
		case "options":
			rc.options = append(rc.options, f[1:]...)
		}
	}
	return rc
}

func (rc resolvConfig) render() []byte {
	var b strings.Builder
	for _, ns := range rc.nameservers {
		b.WriteString("nameserver " + ns + "\n")
	}
	if len(rc.searches) > 0 {
		b.WriteString("search " + strings.Join(rc.searches, " ") + "\n")
	}
	if len(rc.options) > 0 {
		b.WriteString("options " + strings.Join(rc.options, " ") + "\n")
	}
	return []byte(b.String())
}

package nodeagent

import (
	"fmt"
	"slices"
	"strings"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// This is kubelet's sysctl admission (pkg/kubelet/sysctl), pure, so that
// every runtime refuses the same pods with the same words. Writing the
// values into the pod's namespaces is the runtime's.

// safeSysctls is kubelet's safe set (pkg/kubelet/sysctl safe_sysctls.go):
// namespaced and isolated between pods, allowed without any agent option.
var safeSysctls = []string{
	"kernel.shm_rmid_forced",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.tcp_syncookies",
	"net.ipv4.ping_group_range",
	"net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.ip_local_reserved_ports",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
}

// normalizeSysctl turns the slash form ("net/ipv4/tcp_syncookies") into
// the dotted one, as kubelet's NormalizeName: when the first separator is
// a slash, slashes and dots swap.
func normalizeSysctl(name string) string {
	i := strings.IndexAny(name, "./")
	if i < 0 || name[i] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}

// ValidateSysctlPatterns checks an allowlist (kubelet's
// --allowed-unsafe-sysctls): a name or a prefix ending in "*", each
// namespaced, as kubelet's NewAllowlist.
func ValidateSysctlPatterns(patterns []string) error {
	for _, p := range patterns {
		base := strings.TrimSuffix(normalizeSysctl(p), "*")
		if strings.Contains(base, "*") || podrules.SysctlNamespace(base) == "" {
			return fmt.Errorf("sysctl %q is not a namespaced sysctl or a prefix ending in \"*\" of one", p)
		}
	}
	return nil
}

// allowedSysctl reports whether name is safe or matches an allowlist
// pattern.
func allowedSysctl(name string, allowed []string) bool {
	if slices.Contains(safeSysctls, name) {
		return true
	}
	return slices.ContainsFunc(allowed, func(p string) bool {
		p = normalizeSysctl(p)
		if pre, ok := strings.CutSuffix(p, "*"); ok {
			return strings.HasPrefix(name, pre)
		}
		return name == p
	})
}

// PodSysctls returns the pod's sysctls (dotted names) after kubelet's
// admission check (sysctl patternAllowlist.Admit): each must be safe or
// allowed (allowed: ValidateSysctlPatterns patterns), and namespaced in a
// namespace the pod does not share with the host. The error has
// CodeSysctlForbidden and kubelet's message; a runtime returns it from
// RunPodSandbox and the pod is rejected (phase Failed, reason
// SysctlForbidden), never retried.
func PodSysctls(pd *corev1.Pod, allowed []string) (map[string]string, error) {
	sysctls := pd.GetSpec().GetSecurityContext().GetSysctls()
	if len(sysctls) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(sysctls))
	for _, s := range sysctls {
		name := normalizeSysctl(s.GetName())
		if err := validateSysctl(pd, name, allowed); err != nil {
			return nil, Errorf(CodeSysctlForbidden, "forbidden sysctl: %v", err)
		}
		out[name] = s.GetValue()
	}
	return out, nil
}

func validateSysctl(pd *corev1.Pod, name string, allowed []string) error {
	ns := podrules.SysctlNamespace(name)
	switch {
	case ns == "net" && pd.GetSpec().GetHostNetwork():
		return fmt.Errorf("%q not allowed with host net enabled", name)
	case ns == "ipc" && pd.GetSpec().GetHostIpc():
		return fmt.Errorf("%q not allowed with host ipc enabled", name)
	case ns == "" || !allowedSysctl(name, allowed):
		return fmt.Errorf("%q not allowlisted", name)
	}
	return nil
}

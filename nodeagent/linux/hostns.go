package linux

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/podflow/podflow/nodeagent/linux/cgroups"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/network"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// podNetwork is the pod's network: for hostNetwork the host's (no
// namespace, veth or address of its own; the pod IP is Config.NodeIP, as
// kubelet reports status.hostIP), otherwise a namespace, veth and IP of
// its own, and its hostPorts published on the node.
func (r *Runtime) podNetwork(ctx context.Context, pd *corev1.Pod) (network.Attachment, error) {
	uid := pd.GetMetadata().GetUid()
	if pd.GetSpec().GetHostNetwork() {
		return network.Attachment{PodUID: uid, IP: r.cfg.NodeIP}, nil
	}
	att, err := r.net.Setup(ctx, uid)
	if err != nil {
		return att, err
	}
	// Its hostPorts, as the CNI portmap plugin after the bridge plugin.
	if err := r.net.SetHostPorts(uid, att.IP, hostPorts(pd)); err != nil {
		return network.Attachment{}, err
	}
	return att, nil
}

// maxHostname is the longest hostname the kernel takes (64 bytes with
// the terminating NUL), kubelet's hostnameMaxLen.
const maxHostname = 63

// podHostname is kubelet's GeneratePodHostNameAndDomain: the pod's
// hostname is spec.hostname, else its name, cut to 63 characters and of
// any "-" or "." it then ends with (truncatePodHostnameIfNeeded); with
// spec.subdomain its domain is <subdomain>.<namespace>.svc.<domain>.
func podHostname(pd *corev1.Pod, clusterDomain string) (hostname, domain string, err error) {
	name := pd.GetMetadata().GetName()
	hostname = name
	if h := pd.GetSpec().GetHostname(); h != "" {
		hostname = h
	}
	if len(hostname) > maxHostname {
		hostname = strings.TrimRight(hostname[:maxHostname], "-.")
		if hostname == "" {
			return "", "", fmt.Errorf("hostname for pod %q was invalid: %q", name, pd.GetSpec().GetHostname())
		}
	}
	if sd := pd.GetSpec().GetSubdomain(); sd != "" {
		domain = fmt.Sprintf("%s.%s.svc.%s", sd, pd.GetMetadata().GetNamespace(), clusterDomain)
	}
	return hostname, domain, nil
}

// Kubelet's /etc/hosts headers (managedHostsHeader,
// managedHostsHeaderWithHostNetwork).
const (
	hostsHeader            = "# Kubernetes-managed hosts file.\n"
	hostsHeaderHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
)

// hostsFile is the pod's /etc/hosts as kubelet's ensureHostsFile writes
// it: the managed file (localhost lines, then the pod's IP with its FQDN
// and hostname, or its hostname alone without a subdomain), or for a
// hostNetwork pod the node's own /etc/hosts under its header; then the
// pod's hostAliases, one line per IP.
func hostsFile(pd *corev1.Pod, ip, hostname, domain string) []byte {
	var b bytes.Buffer
	if pd.GetSpec().GetHostNetwork() {
		node, _ := os.ReadFile("/etc/hosts")
		b.WriteString(hostsHeaderHostNetwork)
		b.Write(node)
	} else {
		b.WriteString(hostsHeader)
		b.WriteString("127.0.0.1\tlocalhost\n")
		b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
		b.WriteString("fe00::0\tip6-localnet\n")
		b.WriteString("fe00::0\tip6-mcastprefix\n")
		b.WriteString("fe00::1\tip6-allnodes\n")
		b.WriteString("fe00::2\tip6-allrouters\n")
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	if aliases := pd.GetSpec().GetHostAliases(); len(aliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range aliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.GetIp(), strings.Join(a.GetHostnames(), "\t"))
		}
	}
	return b.Bytes()
}

// withPodNamespaces keeps the host's namespaces the pod asks for, as
// containerd's CRI does: hostPID the PID namespace, hostIPC the IPC
// namespace, hostNetwork the network (NetnsPath "") and UTS namespaces;
// joins the pod's shared PID namespace (shareProcessNamespace) when it has
// one; and gives the container the pod's sysctls (already admitted by
// RunPodSandbox), which its init writes in its own namespaces.
func withPodNamespaces(spec *container.Spec, pd *corev1.Pod, sysctls map[string]string, pidns *container.PIDNamespace) {
	spec.Sysctls = sysctls
	spec.PIDNamespace = pidns
	ps := pd.GetSpec()
	spec.HostPID, spec.HostIPC, spec.HostUTS = ps.GetHostPid(), ps.GetHostIpc(), ps.GetHostNetwork()
	if ps.GetHostNetwork() {
		spec.NetnsPath = ""
	}
}

// pidnsCgroup is the cgroup of a pod's PID namespace holder, below the
// pod's as a container's; no container can have the name (a Kubernetes
// container name is a DNS label).
const pidnsCgroup = "_pidns"

// sharedPIDNamespace starts the holder of the pod's shared PID namespace
// when the pod asks for one (shareProcessNamespace; with hostPID, which
// Kubernetes' validation refuses together with it, the host's wins), in a
// cgroup of the pod's, so that the pod's limits count it and reaping an orphaned pod
// kills it. nil: the containers get PID namespaces of their own.
func (r *Runtime) sharedPIDNamespace(ctx context.Context, pd *corev1.Pod, qos, dir string) (*container.PIDNamespace, error) {
	if !pd.GetSpec().GetShareProcessNamespace() || pd.GetSpec().GetHostPid() {
		return nil, nil
	}
	cg, err := r.cg.EnsureContainer(ctx, pd.GetMetadata().GetUid(), qos, pidnsCgroup, cgroups.ContainerPlan{Name: pidnsCgroup})
	if err != nil {
		return nil, err
	}
	ns, err := container.StartPIDNamespace(ctx, r.cfg.Container, dir)
	if err != nil {
		return nil, err
	}
	if err := cg.Add(ns.PID); err != nil {
		_ = ns.Kill(context.WithoutCancel(ctx))
		return nil, err
	}
	return &ns, nil
}

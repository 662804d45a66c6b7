package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/roles"
)

func init() { register(newNodeAgentCmd) }

func newNodeAgentCmd() *cobra.Command { return nodeAgentCmd(roles.LinuxNode) }

// nodeAgentCmd is `podflow nodeagent`, running a Linux node with linux.
func nodeAgentCmd(linux func(ctx context.Context, o roles.LinuxNodeOptions) error) *cobra.Command {
	var o roles.NodeAgentOptions
	var runtime, name, prefix string
	var nodes int
	var lo *roles.LinuxNodeOptions // --runtime linux flags
	cmd := &cobra.Command{
		Use:   "nodeagent",
		Short: "Run node agents: the kubelet, container runtime and CNI of podflow",
		Long: `Run node agents. With --runtime sim, one process simulates --nodes nodes (like
KWOK): each registers its Node, heartbeats, and drives the pods bound to it
through sandbox, image pull, container start, Running and Ready, with pod IPs
from its pod CIDR and failures injected by annotation (see the nodeagent/sim
package documentation). The simulated nodes share one durable consumer.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch runtime {
			case "linux":
				lo.NodeAgentOptions = o
				return linux(cmd.Context(), *lo)
			case "sim":
				return roles.SimNodes(cmd.Context(), roles.SimNodesOptions{NodeAgentOptions: o, Name: name, Nodes: nodes, Prefix: prefix,
					ClusterCIDR: lo.ClusterCIDR, NodeCIDRMaskSize: lo.NodeCIDRMaskSize})
			}
			return fmt.Errorf("--runtime %q is unknown: use sim or linux", runtime)
		},
	}
	configFlag(cmd, &o.Config)
	lo = linuxFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.Metrics, "metrics-addr", "", "serve Prometheus /metrics on this address")
	f.StringVar(&runtime, "runtime", "sim", "runtime: sim (simulated nodes) or linux (one real node: needs root, cgroups and network namespaces)")
	f.IntVar(&nodes, "nodes", 3, "number of simulated nodes")
	f.StringVar(&name, "name", "sim", "name of this simulated cluster (its durable consumer)")
	f.StringVar(&prefix, "node-prefix", "sim-node-", "simulated nodes are named this, then 0001, 0002, ...")
	f.BoolVar(&o.Provision, "provision", true, "declare the agent's durable consumer before starting (needs the admin identity; 'podflow up' does it and runs agents with the node identity)")
	return cmd
}

func linuxFlags(cmd *cobra.Command) *roles.LinuxNodeOptions {
	o := &roles.LinuxNodeOptions{}
	f := cmd.Flags()
	f.StringVar(&o.Node, "node", "", "--runtime linux: this node's name (default: the host name)")
	f.StringVar(&o.DataDir, "data-dir", "", "--runtime linux: the node's directory: pods, images, IPAM (default .podflow/nodes/NODE)")
	f.StringVar(&o.PodCIDR, "pod-cidr", "", "--runtime linux: this node's pod CIDR (default: the next free block of --cluster-cidr, recorded in the store)")
	f.StringVar(&o.ClusterCIDR, plan.ClusterCIDRFlag, "", "where pod CIDRs are allocated from, as kube-controller-manager's flag (default 10.244.0.0/16; with --runtime sim widened until it holds --nodes node CIDRs: 10.224.0.0/11 for 5,000)")
	f.IntVar(&o.NodeCIDRMaskSize, plan.NodeCIDRMaskSizeFlag, 24, "prefix length of each node's pod CIDR, as kube-controller-manager's flag")
	f.StringVar(&o.ServiceCIDR, plan.ServiceCIDRFlag, plan.DefaultServiceCIDR, "--runtime linux: the service CIDR: routed unreachable, proxy rules only inside it (the api stage's must be the same)")
	f.StringVar(&o.Registry, "registry", "", "--runtime linux: registry standing in for docker.io, e.g. 127.0.0.1:5000 (empty: docker.io)")
	f.StringVar(&o.HostIP, "host-ip", "", "--runtime linux: the node's InternalIP, where NodePort Services and hostPorts also answer (default: its address on its pod bridge, the pod CIDR's first address)")
	f.StringSliceVar(&o.HostPaths, plan.AllowHostPathFlag, nil, "--runtime linux: host directories hostPath volumes may use; <path>:ro allows read-only mounts only")
	f.BoolVar(&o.SeccompDefault, "seccomp-default", false, "--runtime linux: RuntimeDefault is the seccomp profile of containers that name none (as kubelet's)")
	f.StringVar(&o.SeccompProfileRoot, "seccomp-profile-root", "", "--runtime linux: directory of Localhost seccomp profiles (default DATA_DIR/seccomp)")
	f.StringSliceVar(&o.AllowedUnsafeSysctls, "allowed-unsafe-sysctls", nil, "--runtime linux: sysctl patterns (e.g. 'net.core.*') pods may set beyond the safe set (as kubelet's)")
	f.Int64Var(&o.ContainerLogMaxSize, "container-log-max-size", 0, "--runtime linux: rotate a container's log before it passes this many bytes (default 10Mi, as kubelet's containerLogMaxSize)")
	f.IntVar(&o.ContainerLogMaxFiles, "container-log-max-files", 0, "--runtime linux: log files kept per container, the current one included (default 5, as kubelet's containerLogMaxFiles)")
	f.BoolVar(&o.Decommission, "decommission", false, "--runtime linux: remove every pod, the bridge and the cgroups of this node, then exit")
	return o
}

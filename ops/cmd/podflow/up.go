package main

import (
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/processes/join"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/up"
)

func init() { register(newUpCmd) }

func newUpCmd() *cobra.Command {
	o := &up.Options{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole system on this machine as supervised processes",
		Long: `Start embedded NATS JetStream, the replicated store, every lifecycle stage and
the node agents, each as its own child process, and supervise them: a child
that dies is restarted with backoff; Ctrl-C or SIGTERM stops them all
cleanly. The client configuration (bus credentials, admin token) is written to
DATA-DIR/config.json, where every other podflow command finds it.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return up.Run(cmd.Context(), o, cmd.OutOrStdout()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.DataDir, "data-dir", ".podflow", "data directory (bus, store, logs, client configuration)")
	f.IntVar(&o.NATSPort, "nats-port", 4222, "NATS client port (0 picks a free one)")
	f.IntVar(&o.StoreReplicas, "store-replicas", 3, "store replicas (an odd number)")
	f.StringVar(&o.Replicas, "replicas", "", "replicas per stage, e.g. admission=2,scheduler=2 (default 1 each)")
	f.StringVar(&o.Runtime, "runtime", "sim", "node runtime: sim (simulated nodes), linux (one real node on this machine: root, cgroups, netns), or auto (linux when possible, else sim)")
	f.IntVar(&o.Nodes, "nodes", 3, "simulated nodes (with --runtime sim)")
	f.IntVar(&o.LinuxNodes, plan.LinuxNodesFlag, 1, "real nodes on this machine (with --runtime linux): linux-node-1, linux-node-2, …, each with its own pod CIDR, bridge, cgroups and nftables tables")
	f.BoolVar(&o.Example, "example", false, "apply the seed's example pod and Service and follow the pod to Ready")
	f.StringVar(&o.ExampleDir, "example-dir", "examples", "directory of the example manifests")
	f.BoolVarP(&o.Quiet, "quiet", "q", false, "print only the essentials")
	f.BoolVar(&o.Cluster, "cluster", false, "run 3 NATS servers clustered over routes on loopback, with R3 streams; every NATS listener and raft transport speaks mutual TLS (certificates in DATA/pki)")
	f.DurationVar(&o.NodeGrace, "node-monitor-grace-period", 40*time.Second, "mark a node NotReady after this long without heartbeats")
	f.StringVar(&o.ServiceCIDR, plan.ServiceCIDRFlag, plan.DefaultServiceCIDR, "the service CIDR (IPv4, /8 to /28): the api stage allocates ClusterIPs from it and the node agent routes it unreachable and programs its proxy rules inside it, as kube-apiserver's flag")
	f.StringVar(&o.ClusterCIDR, plan.ClusterCIDRFlag, "", "where the nodes' pod CIDRs come from, as kube-controller-manager's flag (default 10.244.0.0/16; for simulated nodes widened until it holds --nodes node CIDRs: 10.224.0.0/11 for 5,000)")
	f.IntVar(&o.NodeCIDRMaskSize, plan.NodeCIDRMaskSizeFlag, 0, "prefix length of each node's pod CIDR, as kube-controller-manager's flag (default 24)")
	f.StringVar(&o.PodSecurityDefault, plan.PodSecurityDefaultFlag, "privileged", "Pod Security level enforced in namespaces without the pod-security.kubernetes.io/enforce label: privileged (Kubernetes' default: no checks), baseline (no privileged containers, host namespaces, hostPath or added capabilities: the choice for a shared machine) or restricted; kube-apiserver's PodSecurity admission defaults.enforce")
	f.StringSliceVar(&o.HostPaths, plan.AllowHostPathFlag, nil, "--runtime linux: host directories hostPath volumes may use (none by default; also what a DirectoryOrCreate hostPath may create under); <path>:ro allows read-only mounts only")
	f.IntVar(&o.HTTPSPort, "https-port", 0, "Kubernetes API (HTTPS) port on 127.0.0.1 (default: a free port picked at first start, then kept)")
	f.BoolVar(&o.Init, "init", false, "start a cluster of several machines on this host, its first server: prints the join token of the others")
	f.StringVar(&o.Join, "join", "", "join the cluster of the server at this address (host or host:port, port "+strconv.Itoa(join.DefaultPort)+" by default) as a server, with --token")
	f.StringVar(&o.Token, "token", "", "the join token (K10<CA hash>::<id>.<secret>) printed by up --init or podflow token create")
	f.BoolVar(&o.Agent, "agent", false, "with --join: run only a node agent (a worker), no NATS, store or stage")
	f.StringVar(&o.Advertise, "advertise", "", "with --init or --join: the IP address the other hosts reach this one at (every listener binds it)")
	f.StringVar(&o.Name, "name", "", "with --init or --join: this host's name, its node's and store replica's (default: the host name)")
	f.BoolVar(&o.Leave, "leave", false, "remove this host, stopped, from its cluster of several machines (its store replica, NATS server and nodes), then exit")
	f.DurationVar(&o.TokenTTL, "token-ttl", 24*time.Hour, "with --init: how long the join token it prints is valid (0: until deleted)")
	return cmd
}

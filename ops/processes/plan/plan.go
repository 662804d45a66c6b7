package plan

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/supervisor"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/podsecurity"
)

// Kind is a process role.
type Kind string

// The process roles of a podflow system, in start order.
const (
	NATS      Kind = "nats"      // the JetStream server(s)
	Store     Kind = "store"     // a raftstore replica
	StageKind Kind = "stage"     // a replica of a lifecycle stage
	Registry  Kind = "registry"  // the OCI registry (Linux runtime)
	NodeAgent Kind = "nodeagent" // the node agent(s): simulated nodes or one real node
)

// StopOrder is the order a system stops in: node agents and stages drain
// while the bus and the store are still there.
var StopOrder = []Kind{NodeAgent, StageKind, Store, Registry, NATS}

// Runtimes of the node agents.
const (
	RuntimeSim   = "sim"
	RuntimeLinux = "linux"
)

// LinuxNode is the name of the first real node of the Linux runtime.
const LinuxNode = "linux-node-1"

// MaxLinuxNodes bounds the real nodes one machine runs (each has its own
// /24 of the cluster CIDR, bridge, cgroup subtree and nftables tables).
const MaxLinuxNodes = 8

// LinuxNodeName is the name of the i-th (1-based) real node of the Linux
// runtime: linux-node-1, linux-node-2, …
func LinuxNodeName(i int) string { return fmt.Sprintf("linux-node-%d", i) }

// LinuxNodesFlag names `podflow up`'s count of real nodes.
const LinuxNodesFlag = "linux-nodes"

// MaxReplicas bounds a stage's replicas.
const MaxReplicas = 64

// CheckKind says how to tell that a process is ready.
type CheckKind int

const (
	// CheckNone: started is ready.
	CheckNone CheckKind = iota
	// CheckFile: ready once the file Path exists.
	CheckFile
	// CheckStore: ready once the store answers a linearizable read (a
	// leader is elected among the replicas).
	CheckStore
	// CheckConsumer: ready once a replica pulls from the durable consumer
	// Consumer of the events stream.
	CheckConsumer
	// CheckJetStream: ready once JetStream accepts the streams (a cluster
	// has elected its meta leader).
	CheckJetStream
)

// Check is a readiness check, run by `podflow up` after a step's
// processes have started.
type Check struct {
	Kind     CheckKind
	Path     string // CheckFile
	Consumer string // CheckConsumer
	Timeout  time.Duration
}

// Process is one child process of the system.
type Process struct {
	Name    string // unique: "nats", "nats-2", "store-1", "scheduler-2", "nodeagent-sim"
	Kind    Kind
	Stage   string // the stage of a StageKind process
	Index   int    // 1-based replica index (store, stage, clustered NATS)
	Args    []string
	Env     []string
	Metrics string // its /metrics address, "" for none
	Ready   Check
}

// Role is the supervisor's role of p: "stage/<stage>" for a stage
// replica, else its kind.
func (p Process) Role() string {
	if p.Kind == StageKind {
		return "stage/" + p.Stage
	}
	return string(p.Kind)
}

// Spec is p for the supervisor, run from the podflow binary exe.
func (p Process) Spec(exe string) supervisor.Spec {
	return supervisor.Spec{Name: p.Name, Role: p.Role(), Path: exe, Args: p.Args, Env: p.Env}
}

// Step is a group of processes started together; the next step starts
// once every process of this one is ready.
type Step struct {
	Kind      Kind
	Processes []Process
}

// Options are what a plan is built from: `podflow up`'s flags and the
// addresses chosen at first start.
type Options struct {
	Exe     string // the podflow binary
	DataDir string // absolute
	// NATSPort is the single server's client port. With Cluster, 3
	// servers listen on ClusterClientPorts and route over
	// ClusterRoutePorts.
	NATSPort           int
	Cluster            bool
	ClusterClientPorts []int
	ClusterRoutePorts  []int
	// StoreAddrs are the raft addresses of store-1, store-2, …
	StoreAddrs []string
	// StorePeerAddrs, when set, is where each store replica dials its
	// peers (replica → peer → host:port, `store run --peer-addrs`):
	// `podflow chaos` routes every directed raft link through a relay.
	StorePeerAddrs map[string]map[string]string
	// NATSRoutePeerAddrs, when set with Cluster, is where each NATS server
	// dials its peers' routes (nats-i → nats-j → host:port) and
	// NATSRouteAdvertise the route address each tells the others
	// (`nats --cluster-advertise`): `podflow chaos` routes every directed
	// route link through a relay and advertises an address that refuses,
	// so that no route learnt by gossip goes around the relays.
	NATSRoutePeerAddrs map[string]map[string]string
	NATSRouteAdvertise string
	// StoreUser is the store's NATS user (from the shared credentials).
	StoreUser bus.UserCredential
	// Replicas per stage; a stage absent has none.
	Replicas map[string]int
	Runtime  string // RuntimeSim or RuntimeLinux
	Nodes    int    // simulated nodes
	// LinuxNodes is how many real nodes the Linux runtime runs on this
	// machine (0: 1), each a node agent of its own (LinuxNodeName).
	LinuxNodes int
	NodeGrace  time.Duration
	// TLS runs every NATS listener (clients and routes) and every raft
	// transport over mutual TLS with the certificates of Layout's PKI
	// (NATSServerTLS, RaftTLS of each replica, BusTLS): `up --cluster`. False: plain TCP
	// on loopback.
	TLS bool
	// APIArgs are extra flags of every api replica (the HTTPS front door).
	APIArgs []string
	// StageArgs are extra flags of every replica of a stage, by stage
	// (the root CA publisher's --root-ca-file).
	StageArgs map[string][]string
	// ServiceCIDR is the one service CIDR (kube-apiserver's
	// --service-cluster-ip-range): the api replicas allocate ClusterIPs
	// from it and the Linux node agent's proxy routes it unreachable and
	// programs rules only inside it. "" is DefaultServiceCIDR.
	ServiceCIDR string
	// ClusterCIDR and NodeCIDRMaskSize are where the node agents' pod
	// CIDRs come from (kube-controller-manager's --cluster-cidr and
	// --node-cidr-mask-size); "" and 0 leave the agent's defaults:
	// 10.244.0.0/16, widened for the simulated nodes' count, and /24.
	ClusterCIDR      string
	NodeCIDRMaskSize int
	// PodSecurityDefault is the Pod Security level enforced in namespaces
	// without the pod-security.kubernetes.io/enforce label (admission on
	// create, the api's front door on updates): kube-apiserver's
	// PodSecurity admission configuration defaults.enforce. "" is
	// privileged, Kubernetes' default.
	PodSecurityDefault string
	// HostPaths are the host directories hostPath volumes may use on the
	// Linux node (the node agent's --allow-host-path); none by default.
	HostPaths []string
	// FreeAddr picks a loopback address for a process to listen on
	// (metrics, the registry). Default: a port free right now.
	FreeAddr func() (string, error)
}

// PodSecurityDefaultFlag names the cluster-wide default Pod Security level
// flag of `podflow up` and of the api and admission stages.
const PodSecurityDefaultFlag = "pod-security-default"

// podSecurityArgs pass the default Pod Security level to a stage.
func (o Options) podSecurityArgs() []string {
	if o.PodSecurityDefault == "" {
		return nil
	}
	return []string{"--" + PodSecurityDefaultFlag, o.PodSecurityDefault}
}

// AllowHostPathFlag names the hostPath directories flag of `podflow up`
// and the Linux node agent.
const AllowHostPathFlag = "allow-host-path"

// hostPathArgs pass the allowed hostPath directories to a Linux node agent.
func (o Options) hostPathArgs() []string {
	var args []string
	for _, d := range o.HostPaths {
		args = append(args, "--"+AllowHostPathFlag, d)
	}
	return args
}

// DefaultServiceCIDR is Kubernetes' default service CIDR.
const DefaultServiceCIDR = "10.96.0.0/16"

// ClusterCIDRFlag and NodeCIDRMaskSizeFlag name the pod CIDR flags of
// `podflow up` and the node agent (kube-controller-manager's).
const (
	ClusterCIDRFlag      = "cluster-cidr"
	NodeCIDRMaskSizeFlag = "node-cidr-mask-size"
)

// nodeCIDRArgs pass the pod CIDR options to the node agent.
func (o Options) nodeCIDRArgs() []string {
	var args []string
	if o.ClusterCIDR != "" {
		args = append(args, "--"+ClusterCIDRFlag, o.ClusterCIDR)
	}
	if o.NodeCIDRMaskSize != 0 {
		args = append(args, "--"+NodeCIDRMaskSizeFlag, strconv.Itoa(o.NodeCIDRMaskSize))
	}
	return args
}

// ServiceCIDRFlag names the service CIDR flag of `podflow up`, the api
// stage and the node agent (kube-apiserver's).
const ServiceCIDRFlag = "service-cluster-ip-range"

// serviceCIDR is o's service CIDR, the default when unset.
func (o Options) serviceCIDR() string {
	if o.ServiceCIDR == "" {
		return DefaultServiceCIDR
	}
	return o.ServiceCIDR
}

// Validate checks the options.
func (o Options) Validate() error {
	if err := (ipalloc.Config{CIDR: o.serviceCIDR()}).Validate(); err != nil {
		return fmt.Errorf("plan: --%s: %w", ServiceCIDRFlag, err)
	}
	if _, err := podsecurity.ParseLevel(o.PodSecurityDefault); err != nil {
		return fmt.Errorf("plan: --%s: %w", PodSecurityDefaultFlag, err)
	}
	switch {
	case o.Exe == "" || o.DataDir == "":
		return errors.New("plan: Exe and DataDir are required")
	case len(o.StoreAddrs) < 1 || len(o.StoreAddrs)%2 == 0:
		return fmt.Errorf("plan: %d store replicas: want an odd number", len(o.StoreAddrs))
	case o.Cluster && (len(o.ClusterClientPorts) != 3 || len(o.ClusterRoutePorts) != 3):
		return errors.New("plan: a NATS cluster needs 3 client and 3 route ports")
	case o.Runtime != RuntimeSim && o.Runtime != RuntimeLinux:
		return fmt.Errorf("plan: runtime %q: want %s or %s", o.Runtime, RuntimeSim, RuntimeLinux)
	case o.LinuxNodes < 0 || o.LinuxNodes > MaxLinuxNodes:
		return fmt.Errorf("plan: --%s %d: want 1..%d", LinuxNodesFlag, o.LinuxNodes, MaxLinuxNodes)
	case o.LinuxNodes > 1 && o.Runtime != RuntimeLinux:
		return fmt.Errorf("plan: --%s %d: more than one real node needs --runtime %s", LinuxNodesFlag, o.LinuxNodes, RuntimeLinux)
	}
	if o.Runtime == RuntimeSim {
		cfg := sim.DefaultClusterConfig(max(o.Nodes, 1)).WithCIDRs(o.ClusterCIDR, o.NodeCIDRMaskSize)
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("plan: --%s %s --%s %d for %d nodes: %w", ClusterCIDRFlag, cfg.ClusterCIDR, NodeCIDRMaskSizeFlag, cfg.NodeCIDRMaskSize, o.Nodes, err)
		}
	}
	for s, n := range o.Replicas {
		if !pipeline.Known(s) || n < 0 || n > MaxReplicas {
			return fmt.Errorf("plan: %s=%d: want a stage among %s and 0..%d replicas", s, n, strings.Join(pipeline.Stages, ", "), MaxReplicas)
		}
	}
	return nil
}

// Plan is a whole podflow system as data: its processes, their start
// order and readiness checks, and the restart policy they run under.
type Plan struct {
	Options Options
	Layout  Layout
	// Steps in start order: bus, store, stages, registry (Linux runtime
	// only), nodes.
	Steps []Step
	// Supervisor is the restart policy every process runs under: a child
	// that exits is restarted with backoff (supervisor.Config), stopped
	// with SIGTERM then SIGKILL after the grace period.
	Supervisor supervisor.Config
	// NodeRunner and NodeRole are the (first) node agent's consumer and
	// bus identity: the simulated cluster's, or the real node's.
	NodeRunner bus.RunnerConfig
	NodeRole   bus.RoleSpec
	// Nodes are every node agent's identities, NodeRunner's first: one
	// per real node of the Linux runtime.
	Nodes []NodeAgentIdentity
	// Streams are the streams to provision (R3 on a NATS cluster).
	Streams bus.StreamsConfig
	// Host is set on a plan of one host of several (NewHost).
	Host          *HostOptions
	hostAgentArgs []string
}

// NodeAgentIdentity is one node agent process's identity: the node it
// runs ("" for the simulated cluster), its consumer and its bus role.
type NodeAgentIdentity struct {
	Node   string
	Runner bus.RunnerConfig
	Role   bus.RoleSpec
}

// NodeIdentity returns the node agents' consumer and bus role of runtime:
// one simulated cluster "sim" may act for any node, the real node only
// for itself. Up creates the role's credentials before any server starts.
func NodeIdentity(runtime string) (bus.RunnerConfig, bus.RoleSpec) {
	ids := NodeIdentities(runtime, 1)
	return ids[0].Runner, ids[0].Role
}

// NodeIdentities returns the identities of runtime's node agents: the
// simulated cluster's, or one per real node (linuxNodes of them, 0 is 1),
// each of which may act only for itself.
func NodeIdentities(runtime string, linuxNodes int) []NodeAgentIdentity {
	if runtime != RuntimeLinux {
		rc := pipeline.SimNodesRunnerConfig("sim")
		return []NodeAgentIdentity{{Runner: rc, Role: pipeline.NodeAgentRole(rc, "")}}
	}
	var ids []NodeAgentIdentity
	for i := 1; i <= max(linuxNodes, 1); i++ {
		node := LinuxNodeName(i)
		rc := pipeline.NodeAgentRunnerConfig(node)
		ids = append(ids, NodeAgentIdentity{Node: node, Runner: rc, Role: pipeline.NodeAgentRole(rc, node)})
	}
	return ids
}

// New builds the plan of o.
func New(o Options) (*Plan, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.FreeAddr == nil {
		o.FreeAddr = FreeAddr
	}
	p := &Plan{Options: o, Layout: Layout{Dir: o.DataDir}, Streams: bus.DefaultStreamsConfig()}
	p.Supervisor = supervisor.DefaultConfig()
	p.Supervisor.LogDir = p.Layout.Logs()
	p.Nodes = NodeIdentities(o.Runtime, o.LinuxNodes)
	p.NodeRunner, p.NodeRole = p.Nodes[0].Runner, p.Nodes[0].Role
	if o.Cluster {
		p.Streams.Replicas = 3
	}
	p.Steps = append(p.Steps, Step{Kind: NATS, Processes: p.natsProcesses()}, Step{Kind: Store, Processes: p.storeProcesses()})
	var stages []Process
	for _, s := range pipeline.Stages {
		for i := 1; i <= o.Replicas[s]; i++ {
			sp, err := p.StageProcess(s, i)
			if err != nil {
				return nil, err
			}
			stages = append(stages, sp)
		}
	}
	p.Steps = append(p.Steps, Step{Kind: StageKind, Processes: stages})
	var registry string
	if o.Runtime == RuntimeLinux {
		addr, err := o.FreeAddr()
		if err != nil {
			return nil, err
		}
		registry = addr
		p.Steps = append(p.Steps, Step{Kind: Registry, Processes: []Process{{Name: "registry", Kind: Registry, Args: []string{
			"registry", "--data-dir", p.Layout.Sub("registry"), "--addr", addr, "--addr-file", p.Layout.RegistryAddr(),
		}, Ready: Check{Kind: CheckFile, Path: p.Layout.RegistryAddr(), Timeout: 20 * time.Second}}}})
	}
	var agents []Process
	for _, id := range p.Nodes {
		na, err := p.nodeAgent(id, registry)
		if err != nil {
			return nil, err
		}
		agents = append(agents, na)
	}
	p.Steps = append(p.Steps, Step{Kind: NodeAgent, Processes: agents})
	return p, nil
}

// NATSURLs are the client URLs of the bus.
func (p *Plan) NATSURLs() []string {
	if !p.Options.Cluster {
		return []string{fmt.Sprintf("nats://127.0.0.1:%d", p.Options.NATSPort)}
	}
	var urls []string
	for _, port := range p.Options.ClusterClientPorts {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", port))
	}
	return urls
}

func (p *Plan) natsProcesses() []Process {
	o := p.Options
	if !o.Cluster {
		// The server writes the admin's client file once it listens.
		return []Process{{Name: "nats", Kind: NATS, Args: []string{
			"nats", "--data-dir", p.Layout.Sub("nats"), "--port", strconv.Itoa(o.NATSPort), "--client-config", p.Layout.NATSClientConfig(),
		}, Ready: Check{Kind: CheckFile, Path: p.Layout.NATSClientConfig(), Timeout: 20 * time.Second}}}
	}
	var procs []Process
	for i := range 3 {
		name := fmt.Sprintf("nats-%d", i+1)
		var routes []string
		for j, port := range o.ClusterRoutePorts {
			if j == i {
				continue
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			if a := o.NATSRoutePeerAddrs[name][fmt.Sprintf("nats-%d", j+1)]; a != "" {
				addr = a
			}
			routes = append(routes, "nats-route://"+addr)
		}
		args := []string{
			"nats", "--data-dir", p.Layout.Sub(name), "--port", strconv.Itoa(o.ClusterClientPorts[i]),
			"--server-name", name, "--cluster-name", "podflow", "--cluster-port", strconv.Itoa(o.ClusterRoutePorts[i]),
			"--routes", strings.Join(routes, ","), "--creds", p.Layout.Credentials(),
		}
		if o.NATSRouteAdvertise != "" {
			args = append(args, "--cluster-advertise", o.NATSRouteAdvertise)
		}
		if o.TLS {
			f := p.Layout.NATSServerTLS()
			args = append(args, "--tls-ca", f.CAFile, "--tls-cert", f.CertFile, "--tls-key", f.KeyFile)
		}
		procs = append(procs, Process{Name: name, Kind: NATS, Index: i + 1, Args: args,
			Ready: Check{Kind: CheckJetStream, Timeout: 60 * time.Second}})
	}
	return procs
}

func (p *Plan) storeProcesses() []Process {
	o := p.Options
	var boot []string
	for i, a := range o.StoreAddrs {
		boot = append(boot, fmt.Sprintf("store-%d=%s", i+1, a))
	}
	env := []string{"PODFLOW_NATS_URL=" + strings.Join(p.NATSURLs(), ","), "PODFLOW_NATS_USER=" + o.StoreUser.User, "PODFLOW_NATS_PASSWORD=" + o.StoreUser.Password}
	var procs []Process
	for i, a := range o.StoreAddrs {
		name := fmt.Sprintf("store-%d", i+1)
		args := []string{"store", "run", "--id", name, "--data-dir", p.Layout.Sub(name), "--raft-addr", a, "--bootstrap", strings.Join(boot, ",")}
		if dial := o.StorePeerAddrs[name]; len(dial) > 0 {
			var peers []string
			for id, addr := range dial {
				peers = append(peers, id+"="+addr)
			}
			sort.Strings(peers)
			args = append(args, "--peer-addrs", strings.Join(peers, ","))
		}
		// Raft is mutual TLS on one machine too (ensureRaftTLS in `up`).
		raft := p.Layout.RaftTLS(name)
		args = append(args, "--raft-tls-ca", raft.CAFile, "--raft-tls-cert", raft.CertFile, "--raft-tls-key", raft.KeyFile,
			"--encryption-provider-config", p.Layout.EncryptionConfig())
		if o.TLS {
			nc := p.Layout.BusTLS(pipeline.RoleStore)
			args = append(args, "--tls-ca", nc.CAFile, "--nats-tls-cert", nc.CertFile, "--nats-tls-key", nc.KeyFile)
		}
		procs = append(procs, Process{Name: name, Kind: Store, Index: i + 1, Env: env, Args: args,
			Ready: Check{Kind: CheckStore, Timeout: 60 * time.Second}})
	}
	return procs
}

// StageProcess is replica i (1-based) of stage, listening for /metrics
// on a fresh address.
func (p *Plan) StageProcess(stage string, i int) (Process, error) {
	if !pipeline.Known(stage) || i < 1 || i > MaxReplicas {
		return Process{}, fmt.Errorf("plan: no replica %d of stage %q", i, stage)
	}
	addr, err := p.Options.FreeAddr()
	if err != nil {
		return Process{}, err
	}
	name := fmt.Sprintf("%s-%d", stage, i)
	args := []string{"stage", stage, "--replica", name, "--config", p.Layout.ProcessConfig(pipeline.StageRole(stage)), "--metrics-addr", addr}
	switch stage {
	case pipeline.API:
		args = append(args, "--token-file", p.Layout.Tokens(), "--seal-key", p.Layout.SealKey(), "--"+ServiceCIDRFlag, p.Options.serviceCIDR())
		args = append(args, p.Options.APIArgs...)
		args = append(args, p.Options.podSecurityArgs()...)
	case pipeline.Admission:
		args = append(args, p.Options.podSecurityArgs()...)
	case pipeline.NodeLifecycle:
		args = append(args, "--node-monitor-grace-period", p.Options.NodeGrace.String())
	}
	args = append(args, p.Options.StageArgs[stage]...)
	ready := Check{Kind: CheckConsumer, Consumer: stage, Timeout: 60 * time.Second}
	if pipeline.Controller(stage) {
		ready = Check{} // no consumer: started is ready
	}
	return Process{Name: name, Kind: StageKind, Stage: stage, Index: i, Args: args, Metrics: addr,
		Env:   []string{client.NATSConfigEnv + "=" + p.Layout.RoleConfig(pipeline.StageRole(stage))},
		Ready: ready}, nil
}

// NodeAgentArgs are the (first) node agent's arguments without its
// metrics address: the Linux node's are also those of its
// decommissioning.
func (p *Plan) NodeAgentArgs(registry string) []string {
	return p.NodeAgentArgsOf(p.Nodes[0], registry)
}

// NodeAgentArgsOf are the arguments of the node agent of id, without its
// metrics address: a Linux node's are also those of its decommissioning.
func (p *Plan) NodeAgentArgsOf(id NodeAgentIdentity, registry string) []string {
	if p.Host != nil {
		return p.hostAgentArgs
	}
	if p.Options.Runtime == RuntimeLinux {
		args := []string{"nodeagent", "--runtime", "linux", "--node", id.Node, "--config", p.Layout.ProcessConfig(id.Role.Role),
			"--data-dir", p.Layout.Sub("nodes", id.Node), "--registry", registry, "--" + ServiceCIDRFlag, p.Options.serviceCIDR()}
		return append(append(args, p.Options.nodeCIDRArgs()...), p.Options.hostPathArgs()...)
	}
	args := []string{"nodeagent", "--runtime", "sim", "--name", "sim", "--nodes", strconv.Itoa(p.Options.Nodes), "--config", p.Layout.ProcessConfig(p.NodeRole.Role)}
	return append(args, p.Options.nodeCIDRArgs()...)
}

func (p *Plan) nodeAgent(id NodeAgentIdentity, registry string) (Process, error) {
	addr, err := p.Options.FreeAddr()
	if err != nil {
		return Process{}, err
	}
	name := "nodeagent-sim"
	if p.Options.Runtime == RuntimeLinux {
		name = "nodeagent-" + id.Node
	}
	// Up provisions the agent's consumer as admin; the agent runs with
	// the node identity, which may not.
	args := append(p.NodeAgentArgsOf(id, registry), "--metrics-addr", addr, "--provision=false")
	return Process{Name: name, Kind: NodeAgent, Args: args, Metrics: addr,
		Env:   []string{client.NATSConfigEnv + "=" + p.Layout.RoleConfig(id.Role.Role)},
		Ready: Check{Kind: CheckConsumer, Consumer: id.Runner.Consumer, Timeout: 60 * time.Second}}, nil
}

// Step returns the step of kind (empty when the plan has none).
func (p *Plan) Step(kind Kind) Step {
	for _, s := range p.Steps {
		if s.Kind == kind {
			return s
		}
	}
	return Step{Kind: kind}
}

// Processes returns every process in start order.
func (p *Plan) Processes() []Process {
	var all []Process
	for _, s := range p.Steps {
		all = append(all, s.Processes...)
	}
	return all
}

// Consumers are the durable consumers that must have a replica pulling
// before the system is ready: the node agents', then every stage's with
// replicas.
func (p *Plan) Consumers() []string {
	var out []string
	for _, id := range p.Nodes {
		out = append(out, id.Runner.Consumer)
	}
	for _, s := range pipeline.Stages {
		if p.Options.Replicas[s] > 0 && !pipeline.Controller(s) {
			out = append(out, s)
		}
	}
	return out
}

// Metrics maps every process with a /metrics address to it.
func (p *Plan) Metrics() map[string]string {
	m := map[string]string{}
	for _, pr := range p.Processes() {
		if pr.Metrics != "" {
			m[pr.Name] = pr.Metrics
		}
	}
	return m
}

package plan

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/supervisor"
	"github.com/podflow/podflow/services/pipeline"
)

// Default ports of a host of a cluster of several machines (up --init,
// --join): NATS's clients and routes, raft's, the Kubernetes API's. A
// first server alone also runs the seed NATS server, on the next client
// and route ports.
const (
	DefaultHostNATSPort  = 4222
	DefaultHostRoutePort = 6222
	DefaultHostRaftPort  = 7001
	DefaultHostHTTPSPort = 6443
)

// ServerTag is the NATS server tag of the hosts' own NATS servers: the
// streams of a cluster with fewer than three servers are placed on
// servers with it, never on the seed.
const ServerTag = "podflow:host"

// HostOptions are one host of a cluster of several machines: a server
// (NATS, a store replica, every stage, a node agent) or an agent (a node
// agent only).
type HostOptions struct {
	Exe     string // the podflow binary
	DataDir string // absolute
	// Name is the host's: its NATS server's, its store replica's and its
	// node's (a DNS-1123 subdomain).
	Name string
	// Advertise is the IP the other hosts reach it at; every listener of
	// a server binds it.
	Advertise string
	// Agent: a node agent only.
	Agent bool
	// Ports of a server (0: the defaults above).
	NATSPort, RoutePort, RaftPort, HTTPSPort int
	// Routes are the other servers' NATS route addresses (host:port) a
	// server dials; gossip finds the rest.
	Routes []string
	// Seed: also run the seed NATS server, whose vote lets the first
	// server's JetStream run alone (a JetStream cluster needs two); `up`
	// retires it when the third server joins.
	Seed bool
	// Bootstrap: the store starts as a cluster of this replica alone (the
	// first server); the others wait to be added.
	Bootstrap bool
	// ServerURLs are the NATS client URLs of the cluster's servers: a
	// server's own first, an agent's of the servers it knows.
	ServerURLs []string
	// StoreUser is the store's NATS user (from the shared credentials).
	StoreUser bus.UserCredential
	// Replicas per stage (a server's); a stage absent has 1.
	Replicas    map[string]int
	Runtime     string // RuntimeSim or RuntimeLinux
	Nodes       int    // simulated nodes (RuntimeSim)
	NodeGrace   time.Duration
	ServiceCIDR string
	// ClusterCIDR and NodeCIDRMaskSize: where this host's simulated
	// nodes take their pod CIDRs from (Options); each host numbers its
	// own from the start, so hosts with simulated nodes need distinct
	// ones. A Linux node agent takes its pod CIDR from the store.
	ClusterCIDR      string
	NodeCIDRMaskSize int
	// FreeAddr picks a loopback address for metrics and the registry.
	FreeAddr func() (string, error)
}

func (o *HostOptions) defaults() {
	if o.NATSPort == 0 {
		o.NATSPort = DefaultHostNATSPort
	}
	if o.RoutePort == 0 {
		o.RoutePort = DefaultHostRoutePort
	}
	if o.RaftPort == 0 {
		o.RaftPort = DefaultHostRaftPort
	}
	if o.HTTPSPort == 0 {
		o.HTTPSPort = DefaultHostHTTPSPort
	}
	if o.FreeAddr == nil {
		o.FreeAddr = FreeAddr
	}
}

// Validate checks the options.
func (o HostOptions) Validate() error {
	if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
		return fmt.Errorf("plan: host name %q: %s", o.Name, strings.Join(errs, "; "))
	}
	if a, err := netip.ParseAddr(o.Advertise); err != nil || a.IsUnspecified() {
		return fmt.Errorf("plan: --advertise %q: want the IP address the other hosts reach this one at", o.Advertise)
	}
	switch {
	case o.Exe == "" || o.DataDir == "":
		return errors.New("plan: Exe and DataDir are required")
	case o.Runtime != RuntimeSim && o.Runtime != RuntimeLinux:
		return fmt.Errorf("plan: runtime %q: want %s or %s", o.Runtime, RuntimeSim, RuntimeLinux)
	case len(o.ServerURLs) == 0:
		return errors.New("plan: a host needs the servers' NATS URLs")
	case o.Agent && (o.Seed || o.Bootstrap):
		return errors.New("plan: an agent runs no NATS server and no store replica")
	}
	return nil
}

// HostAddr is host:port of the advertised address.
func (o HostOptions) HostAddr(port int) string {
	return net.JoinHostPort(o.Advertise, strconv.Itoa(port))
}

// NATSURL is the host's NATS client URL.
func (o HostOptions) NATSURL() string { return "nats://" + o.HostAddr(o.NATSPort) }

// RouteAddr is the host's NATS route address.
func (o HostOptions) RouteAddr() string { return o.HostAddr(o.RoutePort) }

// RaftAddr is the host's store replica's raft address.
func (o HostOptions) RaftAddr() string { return o.HostAddr(o.RaftPort) }

// HTTPSAddr is the host's Kubernetes API address.
func (o HostOptions) HTTPSAddr() string { return o.HostAddr(o.HTTPSPort) }

// SeedName is the seed NATS server's name on a first server.
func (o HostOptions) SeedName() string { return o.Name + "-seed" }

// seedRoute is the seed's route address.
func (o HostOptions) seedRoute() string { return o.HostAddr(o.RoutePort + 1) }

// HostNodeRole is the node agent's consumer and bus role of a host: its
// real node, or its simulated cluster named after it.
func HostNodeRole(name, runtime string) (bus.RunnerConfig, bus.RoleSpec) {
	if runtime == RuntimeLinux {
		rc := pipeline.NodeAgentRunnerConfig(name)
		return rc, pipeline.NodeAgentRole(rc, name)
	}
	rc := pipeline.SimNodesRunnerConfig(name)
	return rc, pipeline.NodeAgentRole(rc, "")
}

// NewHost builds the plan of one host of a cluster of several machines.
// Its processes use the files of Layout: the host's certificates
// (NATSServerTLS, RaftTLS(name), BusTLS(role), the API's serving
// certificate), the shared credentials and each role's configuration.
func NewHost(o HostOptions, apiArgs []string) (*Plan, error) {
	o.defaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	p := &Plan{Layout: Layout{Dir: o.DataDir}, Streams: bus.DefaultStreamsConfig()}
	p.Options = Options{Exe: o.Exe, DataDir: o.DataDir, Runtime: o.Runtime, Nodes: o.Nodes, NodeGrace: o.NodeGrace,
		ServiceCIDR: o.ServiceCIDR, ClusterCIDR: o.ClusterCIDR, NodeCIDRMaskSize: o.NodeCIDRMaskSize,
		FreeAddr: o.FreeAddr, TLS: true, Replicas: map[string]int{}, APIArgs: apiArgs,
		// The cluster CA signed every host's API serving certificate.
		StageArgs: map[string][]string{pipeline.RootCACert: {"--root-ca-file", p.Layout.PKI("ca.crt")}}}
	p.Supervisor = supervisor.DefaultConfig()
	p.Supervisor.LogDir = p.Layout.Logs()
	p.NodeRunner, p.NodeRole = HostNodeRole(o.Name, o.Runtime)
	p.Nodes = []NodeAgentIdentity{{Runner: p.NodeRunner, Role: p.NodeRole}}
	if o.Runtime == RuntimeLinux {
		p.Nodes[0].Node = o.Name
	}
	p.Streams.PlacementTags = []string{ServerTag}
	natsTLS := p.Layout.NATSServerTLS()
	tlsArgs := []string{"--tls-ca", natsTLS.CAFile, "--tls-cert", natsTLS.CertFile, "--tls-key", natsTLS.KeyFile}
	if !o.Agent {
		var routes []string
		for _, r := range o.Routes {
			routes = append(routes, "nats-route://"+r)
		}
		if o.Seed {
			routes = append(routes, "nats-route://"+o.seedRoute())
		}
		natsArgs := func(name, dir string, port, routePort int, routes []string, tags ...string) []string {
			a := []string{"nats", "--data-dir", p.Layout.Sub(dir), "--host", o.Advertise, "--port", strconv.Itoa(port),
				"--server-name", name, "--cluster-name", "podflow", "--cluster-port", strconv.Itoa(routePort),
				"--routes", strings.Join(routes, ","), "--creds", p.Layout.Credentials()}
			if len(tags) > 0 {
				a = append(a, "--tags", strings.Join(tags, ","))
			}
			return append(a, tlsArgs...)
		}
		procs := []Process{{Name: "nats", Kind: NATS, Index: 1, Args: natsArgs(o.Name, "nats", o.NATSPort, o.RoutePort, routes, ServerTag),
			Ready: Check{Kind: CheckJetStream, Timeout: 60 * time.Second}}}
		if o.Seed {
			procs = append(procs, Process{Name: "nats-seed", Kind: NATS, Index: 2,
				Args:  natsArgs(o.SeedName(), "nats-seed", o.NATSPort+1, o.RoutePort+1, []string{"nats-route://" + o.RouteAddr()}),
				Ready: Check{Kind: CheckJetStream, Timeout: 60 * time.Second}})
		}
		p.Steps = append(p.Steps, Step{Kind: NATS, Processes: procs})

		raft, nc := p.Layout.RaftTLS(o.Name), p.Layout.BusTLS(pipeline.RoleStore)
		args := []string{"store", "run", "--id", o.Name, "--data-dir", p.Layout.Sub("store"), "--raft-addr", o.RaftAddr(),
			"--tls-ca", raft.CAFile, "--raft-tls-cert", raft.CertFile, "--raft-tls-key", raft.KeyFile,
			"--nats-tls-cert", nc.CertFile, "--nats-tls-key", nc.KeyFile, "--encryption-provider-config", p.Layout.EncryptionConfig()}
		if o.Bootstrap {
			args = append(args, "--bootstrap", o.Name+"="+o.RaftAddr())
		}
		env := []string{"PODFLOW_NATS_URL=" + strings.Join(o.ServerURLs, ","), "PODFLOW_NATS_USER=" + o.StoreUser.User, "PODFLOW_NATS_PASSWORD=" + o.StoreUser.Password}
		p.Steps = append(p.Steps, Step{Kind: Store, Processes: []Process{{Name: "store", Kind: Store, Index: 1, Env: env, Args: args,
			Ready: Check{Kind: CheckStore, Timeout: 120 * time.Second}}}})

		var stages []Process
		for _, s := range pipeline.Stages {
			n, ok := o.Replicas[s]
			if !ok {
				n = 1
			}
			p.Options.Replicas[s] = n
			for i := 1; i <= n; i++ {
				sp, err := p.StageProcess(s, i)
				if err != nil {
					return nil, err
				}
				// Replica names are unique in the cluster: the host's name.
				replica := fmt.Sprintf("%s-%s", s, o.Name)
				if i > 1 {
					replica = fmt.Sprintf("%s-%s-%d", s, o.Name, i)
				}
				for j, a := range sp.Args {
					if a == "--replica" {
						sp.Args[j+1] = replica
					}
				}
				stages = append(stages, sp)
			}
		}
		p.Steps = append(p.Steps, Step{Kind: StageKind, Processes: stages})
	}
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
	maddr, err := o.FreeAddr()
	if err != nil {
		return nil, err
	}
	agentArgs := append([]string{"nodeagent", "--runtime", "sim", "--name", o.Name, "--node-prefix", o.Name + "-sim-", "--nodes", strconv.Itoa(o.Nodes),
		"--config", p.Layout.ProcessConfig(p.NodeRole.Role)}, p.Options.nodeCIDRArgs()...)
	name := "nodeagent-sim"
	if o.Runtime == RuntimeLinux {
		name = "nodeagent-" + o.Name
		agentArgs = []string{"nodeagent", "--runtime", "linux", "--node", o.Name, "--config", p.Layout.ProcessConfig(p.NodeRole.Role),
			"--data-dir", p.Layout.Sub("nodes", o.Name), "--registry", registry, "--" + ServiceCIDRFlag, p.Options.serviceCIDR(), "--host-ip", o.Advertise}
	}
	p.hostAgentArgs = agentArgs
	agentArgs = append(agentArgs, "--metrics-addr", maddr, "--provision=false")
	p.Steps = append(p.Steps, Step{Kind: NodeAgent, Processes: []Process{{Name: name, Kind: NodeAgent, Args: agentArgs, Metrics: maddr,
		Env:   []string{client.NATSConfigEnv + "=" + p.Layout.RoleConfig(p.NodeRole.Role)},
		Ready: Check{Kind: CheckConsumer, Consumer: p.NodeRunner.Consumer, Timeout: 60 * time.Second}}}})
	p.Host = &o
	return p, nil
}

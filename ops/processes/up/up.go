package up

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/podsecurity"
)

// Options configure `podflow up` (its flags).
type Options struct {
	DataDir       string        // bus, store, logs, client configuration
	NATSPort      int           // NATS client port (0 picks a free one)
	StoreReplicas int           // store replicas (an odd number)
	Replicas      string        // replicas per stage, "admission=2,scheduler=2" ("": 1 each)
	Runtime       string        // plan.RuntimeSim, plan.RuntimeLinux or "auto"
	Nodes         int           // simulated nodes (RuntimeSim)
	LinuxNodes    int           // real nodes on this machine (RuntimeLinux; 0: 1)
	Example       bool          // apply the example pod and Service and follow the pod to Ready
	ExampleDir    string        // directory of the example manifests
	Quiet         bool          // print only the essentials
	NodeGrace     time.Duration // mark a node NotReady after this long without heartbeats
	Cluster       bool          // 3 NATS servers over routes, R3 streams, mutual TLS everywhere
	HTTPSPort     int           // Kubernetes API port (0: picked at first start, then kept)
	ServiceCIDR   string        // the api's ClusterIPs and the node proxy's range
	// ClusterCIDR and NodeCIDRMaskSize: where node agents' pod CIDRs come
	// from ("" and 0: the agent's defaults, see plan.Options).
	ClusterCIDR      string
	NodeCIDRMaskSize int
	// PodSecurityDefault is the Pod Security level of namespaces without
	// the enforce label ("" is privileged, Kubernetes' default).
	PodSecurityDefault string
	// HostPaths are the host directories hostPath volumes may use on the
	// Linux node (none by default).
	HostPaths []string

	// A host of a cluster of several machines (runHost).
	Init      bool          // the first server: a new cluster
	Join      string        // a server's join address (host[:port]) to join its cluster
	Token     string        // the join token (--join)
	Agent     bool          // with Join: a node agent only
	Advertise string        // the IP the other hosts reach this one at
	Name      string        // this host's name (default: the host name)
	TokenTTL  time.Duration // how long the join token --init prints is valid (0: until deleted)
	Leave     bool          // this stopped host leaves its cluster (RemoveHost), then up returns
}

// Run runs the system of o's plan (ops/processes/plan) under the supervisor until
// ctx is done: each step starts the plan's processes of one role and waits
// until they are ready, then does what the next role needs.
func Run(ctx context.Context, o *Options, out io.Writer) error {
	if err := o.Resolve(out); err != nil {
		return err
	}
	if o.Leave {
		return leave(ctx, o, out)
	}
	if o.Init || o.Join != "" || o.Agent || o.Advertise != "" {
		return runHost(ctx, o, out)
	}
	u, err := newUp(o, out) // data dir, its lock, addresses, credentials, the plan
	if err != nil {
		return err
	}
	defer u.unlock()
	if err := u.startSupervisor(); err != nil {
		return err
	}
	defer u.shutdown()
	if err := u.startBus(ctx); err != nil { // NATS, the role files, the streams
		return err
	}
	defer u.conn.Close()
	if err := u.startStore(ctx); err != nil {
		return err
	}
	if err := u.bootstrap(ctx); err != nil { // admin token, seed objects, config.json
		return err
	}
	if err := u.startStep(ctx, plan.StageKind, ""); err != nil {
		return err
	}
	if err := u.startNodes(ctx); err != nil { // with the registry on the Linux runtime
		return err
	}
	if err := u.waitReady(ctx); err != nil {
		return err
	}
	if err := u.startConsole(ctx); err != nil {
		return err
	}
	u.printRunning()
	if o.Example {
		if err := RunExample(ctx, u.session(), o.ExampleDir, out); err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "up: example: %v\n", err)
		}
	}
	return u.serveScale(ctx) // until ctx is done
}

// Resolve checks the service CIDR and the store replicas, and
// picks the runtime of --runtime auto.
func (o *Options) Resolve(out io.Writer) error {
	if err := (ipalloc.Config{CIDR: o.ServiceCIDR}).Validate(); err != nil {
		return fmt.Errorf("--%s: %w", plan.ServiceCIDRFlag, err)
	}
	if _, err := podsecurity.ParseLevel(o.PodSecurityDefault); err != nil {
		return fmt.Errorf("--%s: %w", plan.PodSecurityDefaultFlag, err)
	}
	if o.StoreReplicas < 1 || o.StoreReplicas%2 == 0 {
		return fmt.Errorf("--store-replicas must be an odd number, got %d", o.StoreReplicas)
	}
	switch o.Runtime {
	case plan.RuntimeSim, plan.RuntimeLinux:
	case "auto":
		o.Runtime = plan.RuntimeLinux
		if err := linux.Check(); err != nil {
			fmt.Fprintf(out, "up: the Linux runtime is not available here (%v): falling back to %d simulated nodes\n", err, o.Nodes)
			o.Runtime = plan.RuntimeSim
		}
	default:
		return fmt.Errorf("--runtime %q: want sim, linux or auto", o.Runtime)
	}
	if len(o.HostPaths) > 0 && (o.Runtime != plan.RuntimeLinux || o.Init || o.Join != "") {
		return fmt.Errorf("--%s: hostPath volumes are for the Linux node of a single-host up (--runtime linux, without --init or --join)", plan.AllowHostPathFlag)
	}
	for _, d := range o.HostPaths {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("--%s %q: not an absolute path", plan.AllowHostPathFlag, d)
		}
	}
	if o.LinuxNodes < 0 || o.LinuxNodes > plan.MaxLinuxNodes {
		return fmt.Errorf("--%s %d: want 1..%d", plan.LinuxNodesFlag, o.LinuxNodes, plan.MaxLinuxNodes)
	}
	if o.LinuxNodes > 1 && (o.Runtime != plan.RuntimeLinux || o.Init || o.Join != "" || o.Agent || o.Advertise != "") {
		return fmt.Errorf("--%s %d: several real nodes are for a single-host up with --runtime linux (a host of several machines runs one)", plan.LinuxNodesFlag, o.LinuxNodes)
	}
	if o.Runtime == plan.RuntimeLinux {
		if err := linux.Check(); err != nil {
			return err
		}
		// Another podflow system's node (make run, a second clone) is
		// never torn down by this one: refuse before starting anything.
		if o.Name != "" {
			return linux.NodeInUse(linux.DefaultLockDir, o.Name)
		}
		for _, id := range plan.NodeIdentities(o.Runtime, o.LinuxNodes) {
			if err := linux.NodeInUse(linux.DefaultLockDir, id.Node); err != nil {
				return err
			}
		}
	}
	return nil
}

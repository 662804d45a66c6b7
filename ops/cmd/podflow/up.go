package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/podsecurity"
)

func init() { register(newUpCmd) }

type upOptions struct {
	dataDir       string
	natsPort      int
	storeReplicas int
	replicas      string
	runtime       string
	nodes         int
	example       bool
	exampleDir    string
	quiet         bool
	nodeGrace     time.Duration
	cluster       bool
	httpsPort     int    // Kubernetes API port (0: picked at first start)
	serviceCIDR   string // the api's ClusterIPs and the node proxy's range
	podSecurity   string // the default Pod Security level
}

func newUpCmd() *cobra.Command {
	o := &upOptions{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole system on this machine as supervised processes",
		Long: `Start embedded NATS JetStream, the replicated store, every lifecycle stage and
the node agents, each as its own child process, and supervise them: a child
that dies is restarted with backoff; Ctrl-C or SIGTERM stops them all
cleanly. The client configuration (bus credentials, admin token) is written to
DATA-DIR/config.json, where every other podflow command finds it.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUp(cmd.Context(), o, cmd.OutOrStdout()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", ".podflow", "data directory (bus, store, logs, client configuration)")
	f.IntVar(&o.natsPort, "nats-port", 4222, "NATS client port (0 picks a free one)")
	f.IntVar(&o.storeReplicas, "store-replicas", 3, "store replicas (an odd number)")
	f.StringVar(&o.replicas, "replicas", "", "replicas per stage, e.g. admission=2,scheduler=2 (default 1 each)")
	f.StringVar(&o.runtime, "runtime", "sim", "node runtime: sim (simulated nodes), linux (one real node on this machine: root, cgroups, netns), or auto (linux when possible, else sim)")
	f.IntVar(&o.nodes, "nodes", 3, "simulated nodes (with --runtime sim)")
	f.BoolVar(&o.example, "example", false, "apply the seed's example pod and Service and follow the pod to Ready")
	f.StringVar(&o.exampleDir, "example-dir", "examples", "directory of the example manifests")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print only the essentials")
	f.BoolVar(&o.cluster, "cluster", false, "run 3 NATS servers clustered over routes on loopback, with R3 streams; every NATS listener and raft transport speaks mutual TLS (certificates in DATA/pki)")
	f.DurationVar(&o.nodeGrace, "node-monitor-grace-period", 40*time.Second, "mark a node NotReady after this long without heartbeats")
	f.StringVar(&o.serviceCIDR, plan.ServiceCIDRFlag, plan.DefaultServiceCIDR, "the service CIDR (IPv4, /8 to /28): the api stage allocates ClusterIPs from it and the node agent routes it unreachable and programs its proxy rules inside it, as kube-apiserver's flag")
	f.StringVar(&o.podSecurity, plan.PodSecurityDefaultFlag, "privileged", "Pod Security level enforced in namespaces without the pod-security.kubernetes.io/enforce label: privileged (Kubernetes' default: no checks), baseline (no privileged containers, host namespaces, hostPath or added capabilities: the choice for a shared machine) or restricted; kube-apiserver's PodSecurity admission defaults.enforce")
	f.IntVar(&o.httpsPort, "https-port", 0, "Kubernetes API (HTTPS) port on 127.0.0.1 (default: a free port picked at first start, then kept)")
	return cmd
}

// runUp runs the system of o's plan (ops/processes/plan) under the supervisor until
// ctx is done: each step starts the plan's processes of one role and waits
// until they are ready, then does what the next role needs.
func runUp(ctx context.Context, o *upOptions, out io.Writer) error {
	if err := o.resolveRuntime(out); err != nil {
		return err
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
	if o.example {
		if err := runExample(ctx, u.session(), o.exampleDir, out); err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "up: example: %v\n", err)
		}
	}
	return u.serveScale(ctx) // until ctx is done
}

// resolveRuntime checks the service CIDR and the store replicas, and
// picks the runtime of --runtime auto.
func (o *upOptions) resolveRuntime(out io.Writer) error {
	if err := (ipalloc.Config{CIDR: o.serviceCIDR}).Validate(); err != nil {
		return fmt.Errorf("--%s: %w", plan.ServiceCIDRFlag, err)
	}
	if _, err := podsecurity.ParseLevel(o.podSecurity); err != nil {
		return fmt.Errorf("--%s: %w", plan.PodSecurityDefaultFlag, err)
	}
	if o.storeReplicas < 1 || o.storeReplicas%2 == 0 {
		return fmt.Errorf("--store-replicas must be an odd number, got %d", o.storeReplicas)
	}
	switch o.runtime {
	case plan.RuntimeSim, plan.RuntimeLinux:
	case "auto":
		o.runtime = plan.RuntimeLinux
		if err := linux.Check(); err != nil {
			fmt.Fprintf(out, "up: the Linux runtime is not available here (%v): falling back to %d simulated nodes\n", err, o.nodes)
			o.runtime = plan.RuntimeSim
		}
	default:
		return fmt.Errorf("--runtime %q: want sim, linux or auto", o.runtime)
	}
	if o.runtime == plan.RuntimeLinux {
		if err := linux.Check(); err != nil {
			return err
		}
		// Another podflow system's node (make run, a second clone) is
		// never torn down by this one: refuse before starting anything.
		return linux.NodeInUse(linux.DefaultLockDir, plan.LinuxNode)
	}
	return nil
}

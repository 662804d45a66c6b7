package roles

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/nodeagent/nodemetrics"
	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/ops/client"
	wire "github.com/podflow/podflow/ops/processes/nodewire"
	"github.com/podflow/podflow/services/nodeexec"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/podmetrics"
	"github.com/podflow/podflow/services/stage"
)

// NodeAgentOptions are common to every node agent.
type NodeAgentOptions struct {
	Config  string // client configuration (see client.LoadConfig)
	Metrics string // serve Prometheus /metrics on this address ("" for none)
	// Provision declares the agent's consumer at start; `podflow up`
	// provisions it as admin and runs the agent with the node role.
	Provision bool
}

// SimNodesOptions configure a simulated cluster (`podflow nodeagent
// --runtime sim`).
type SimNodesOptions struct {
	NodeAgentOptions
	Name  string // the simulated cluster's name (its durable consumer)
	Nodes int    // how many nodes it simulates
	// Prefix names the nodes, Prefix + "0001" on ("": sim-node-).
	Prefix string
	// ClusterCIDR and NodeCIDRMaskSize are where the nodes' pod CIDRs come
	// from ("": sim.SizedClusterCIDR; 0: sim.DefaultNodeCIDRMaskSize).
	ClusterCIDR      string
	NodeCIDRMaskSize int
}

// clusterConfig is o's simulated cluster.
func (o SimNodesOptions) clusterConfig() (sim.ClusterConfig, error) {
	cfg := sim.DefaultClusterConfig(o.Nodes).WithCIDRs(o.ClusterCIDR, o.NodeCIDRMaskSize)
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("--cluster-cidr %s --node-cidr-mask-size %d for --nodes %d: %w", cfg.ClusterCIDR, cfg.NodeCIDRMaskSize, o.Nodes, err)
	}
	return cfg, nil
}

// SimNodes runs simulated nodes until ctx is done: one process, one
// durable consumer, every node registered and heartbeating.
func SimNodes(ctx context.Context, o SimNodesOptions) error {
	cfg, err := o.clusterConfig()
	if err != nil {
		return err
	}
	sess, err := client.Open(ctx, o.Config, "nodeagent-"+o.Name)
	if err != nil {
		return err
	}
	defer sess.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("nodeagent", o.Name)

	rc := pipeline.SimNodesRunnerConfig(o.Name)
	if err := provisionAgent(ctx, sess, rc, o.Provision); err != nil {
		return err
	}
	m := stage.NewMetrics("nodeagent")
	nm, err := nodemetrics.New(m.Registry)
	if err != nil {
		return err
	}
	// The nodes run what the built-in shell can of each container's
	// command, and answer exec, attach and logs as nodes do (simexec.go).
	node := newSimNode(nil, simNet{sess.Store})
	cfg.Runtime.Programs = node
	if o.Prefix != "" {
		cfg.NamePrefix = o.Prefix
	}
	cl, err := sim.NewCluster(cfg, wire.NewStore(sess.Store).WithObjectCache(ctx).WithTokens(sess.Bus.NATS()), nm.Publisher(wire.NewPublisher(sess.Bus)))
	if err != nil {
		return err
	}
	node.cl = cl
	if err := cl.Start(ctx); err != nil {
		cl.Stop()
		return err
	}
	defer cl.Stop()
	log.Info("simulated nodes registered", "nodes", o.Nodes, "clusterCIDR", cfg.ClusterCIDR, "nodeCIDRMaskSize", cfg.NodeCIDRMaskSize)
	rc.Observer = m
	if o.Metrics != "" {
		addr, err := stage.ServeMetrics(ctx, o.Metrics, m)
		if err != nil {
			return err
		}
		log.Info("serving metrics", "addr", "http://"+addr+"/metrics")
	}
	if err := stage.AnswerPings(ctx, sess.Bus, stage.Env{Stage: "nodeagent", Replica: rc.Consumer}, m); err != nil {
		return err
	}
	execs, err := nodeexec.Serve(sess.Bus.NATS(), nodeexec.DefaultConfig(), "", node, log)
	if err != nil {
		return err
	}
	defer execs.Stop()
	logs, err := node.serveLogs(ctx, sess.Bus.NATS())
	if err != nil {
		return err
	}
	defer func() { _ = logs.Unsubscribe() }()
	// kubectl debug's ephemeral containers, at once (no event announces them).
	pw, err := wire.NewPodWatchOf(sess.Store, cl, cl.HasNode, log)
	if err != nil {
		return err
	}
	pctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if err := pw.Run(pctx); err != nil {
			log.Warn("pod watch stopped: ephemeral containers wait for the next reconcile", "err", err)
		}
	}()
	defer func() { stopWatch(); <-watched }()
	readings, err := podmetrics.Serve(ctx, sess.Bus.NATS(), "", func(node string) (podmetrics.Reading, error) {
		return simReading(cl, node, time.Now())
	})
	if err != nil {
		return err
	}
	defer func() { _ = readings.Unsubscribe() }()
	runner, err := bus.NewRunner(sess.Bus, rc, nm.Handler(wire.Handler(sess.Store, cl, time.Second)))
	if err != nil {
		return err
	}
	return runner.Run(ctx)
}

// provisionAgent declares a node agent's consumers, or with provision
// false only checks that they exist (the node identity may not manage
// consumers).
func provisionAgent(ctx context.Context, sess *client.Session, rc bus.RunnerConfig, provision bool) error {
	if !provision {
		if _, err := sess.Bus.JetStream().Consumer(ctx, rc.Stream, rc.Consumer); err != nil {
			return fmt.Errorf("the node agent's consumer %q (provisioned by `podflow up`, or run with --provision as admin): %w", rc.Consumer, err)
		}
		return nil
	}
	return ProvisionNodeAgent(ctx, sess.Bus, rc)
}

// ProvisionNodeAgent declares a node agent's consumers (as admin: `podflow
// up` for the agents it runs, or an agent run with --provision).
func ProvisionNodeAgent(ctx context.Context, conn *bus.Conn, rc bus.RunnerConfig) error {
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		// Each attempt is bounded: a server that joined a cluster a moment
		// ago may not pass its request to the meta leader yet.
		actx, c := context.WithTimeout(pctx, 5*time.Second)
		err := bus.Provision(actx, conn.JetStream(), bus.Topology{Consumers: rc.ConsumerSpecs()})
		c()
		if err == nil {
			return nil
		}
		select {
		case <-pctx.Done():
			return fmt.Errorf("provision the node agent's consumer %q: %w", rc.Consumer, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

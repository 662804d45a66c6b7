package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/nodeagent/nodemetrics"
	"github.com/podflow/podflow/nodeagent/sim"
	wire "github.com/podflow/podflow/ops/nodewire"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

func init() { register(newNodeAgentCmd) }

type nodeAgentOptions struct {
	metrics string
	config  string
	runtime string
	nodes   int
	name    string
	// provision declares the agent's consumer at start; `podflow up`
	// provisions it as admin and runs the agent with the node role.
	provision bool
}

func newNodeAgentCmd() *cobra.Command {
	o := &nodeAgentOptions{}
	var lo *linuxOptions // --runtime linux flags, in nodeagent_linux.go
	cmd := &cobra.Command{
		Use:   "nodeagent",
		Short: "Run node agents: the kubelet, container runtime and CNI of podflow",
		Long: `Run node agents. With --runtime sim, one process simulates --nodes nodes (like
KWOK): each registers its Node, heartbeats, and drives the pods bound to it
through sandbox, image pull, container start, Running and Ready, with pod IPs
from its pod CIDR and failures injected by annotation (see the nodeagent/sim
package documentation). The simulated nodes share one durable consumer.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.runtime == "linux" {
				return runLinuxNodeAgent(cmd, o, lo)
			}
			if o.runtime != "sim" {
				return fmt.Errorf("--runtime %q is unknown: use sim or linux", o.runtime)
			}
			cfg, err := loadConfig(o.config)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sess, err := connect(ctx, cfg, "nodeagent-"+o.name)
			if err != nil {
				return err
			}
			defer sess.Close()
			log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("nodeagent", o.name)

			rc := pipeline.SimNodesRunnerConfig(o.name)
			if err := provisionAgent(ctx, sess, rc, o.provision); err != nil {
				return err
			}
			m := stage.NewMetrics("nodeagent")
			nm, err := nodemetrics.New(m.Registry)
			if err != nil {
				return err
			}
			cl, err := sim.NewCluster(sim.DefaultClusterConfig(o.nodes), wire.NewStore(sess.store), nm.Publisher(wire.NewPublisher(sess.bus)))
			if err != nil {
				return err
			}
			if err := cl.Start(ctx); err != nil {
				cl.Stop()
				return err
			}
			defer cl.Stop()
			log.Info("simulated nodes registered", "nodes", o.nodes)
			rc.Observer = m
			if o.metrics != "" {
				addr, err := stage.ServeMetrics(ctx, o.metrics, m)
				if err != nil {
					return err
				}
				log.Info("serving metrics", "addr", "http://"+addr+"/metrics")
			}
			if err := stage.AnswerPings(ctx, stage.Env{Bus: sess.bus, Stage: "nodeagent", Replica: rc.Consumer}, m); err != nil {
				return err
			}
			runner, err := bus.NewRunner(sess.bus, rc, nm.Handler(wire.Handler(sess.store, cl, time.Second)))
			if err != nil {
				return err
			}
			return runner.Run(ctx)
		},
	}
	configFlag(cmd, &o.config)
	lo = linuxFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.metrics, "metrics-addr", "", "serve Prometheus /metrics on this address")
	f.StringVar(&o.runtime, "runtime", "sim", "runtime: sim (simulated nodes) or linux (one real node: needs root, cgroups and network namespaces)")
	f.IntVar(&o.nodes, "nodes", 3, "number of simulated nodes")
	f.StringVar(&o.name, "name", "sim", "name of this simulated cluster (its durable consumer)")
	f.BoolVar(&o.provision, "provision", true, "declare the agent's durable consumer before starting (needs the admin identity; `podflow up` does it and runs agents with the node identity)")
	return cmd
}

// provisionAgent declares a node agent's consumers, or with provision
// false only checks that they exist (the node identity may not manage
// consumers).
func provisionAgent(ctx context.Context, sess *session, rc bus.RunnerConfig, provision bool) error {
	if !provision {
		if _, err := sess.bus.JetStream().Consumer(ctx, rc.Stream, rc.Consumer); err != nil {
			return fmt.Errorf("the node agent's consumer %q (provisioned by `podflow up`, or run with --provision as admin): %w", rc.Consumer, err)
		}
		return nil
	}
	return provisionNodeAgent(ctx, sess.bus, rc)
}

// provisionNodeAgent declares a node agent's consumers (as admin: `podflow
// up` for the agents it runs, or an agent run with --provision).
func provisionNodeAgent(ctx context.Context, conn *bus.Conn, rc bus.RunnerConfig) error {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := bus.Provision(pctx, conn.JetStream(), bus.Topology{Consumers: rc.ConsumerSpecs()}); err != nil {
		return fmt.Errorf("provision the node agent's consumer %q: %w", rc.Consumer, err)
	}
	return nil
}

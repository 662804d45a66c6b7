package main

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/chaos"
)

func init() { register(newChaosCmd) }

func newChaosCmd() *cobra.Command {
	o := &chaos.Options{}
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run a pod workload while killing podflow's processes, then check that nothing was lost",
		Long: `Publish --pods pods over --duration while SIGKILLing a random process every
--kill-interval — stage replicas, store replicas (the leader among them),
node agents, and NATS when named in --targets — and, with --pause, SIGSTOP
one for --pause-for (longer than the raft election timeout) before SIGCONT.
Only processes of the ` + "`podflow up`" + ` under test are signalled, by PID. Then it
waits for the system to settle and checks, from the store and the streams:
every pod Running and Ready; no pod bound twice; no node overcommitted; no
pod IP given twice; every node's accounting matching its pods; the store
replicas agreeing. It prints a report and exits 2 on any violation. Runs are
seeded (--seed) so that a failing one replays. It works on the configured
system (--config, else $PODFLOW_CONFIG, ./.podflow/config.json,
~/.podflow/config.json); with --own, when none is configured, or for
network faults, it starts its own ` + "`podflow up`" + ` in a temporary directory.
With --host-count 3 it starts three hosts of its own instead (` + "`up --init`" + `, ` + "`up --join`" + `)
and kills whole hosts, then checks the same invariants.

--scenario rollout rolls a Deployment out and scales it to --scale-to while
SIGKILLing replicas of the deployment and replicaset controllers, and checks
that its ReplicaSets never ask for more than replicas + maxSurge pods, that no
ReplicaSet has more live pods than it was asked for, that the rollout
finishes (kubectl rollout status) and that no orphan is left. --scenario job
runs a Job of --completions while SIGKILLing replicas of the job controller,
and checks that each completion is counted once and no pod keeps the
batch.kubernetes.io/job-tracking finalizer. Both stop after --duration or
--max-kills kills.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return chaos.Run(cmd.Context(), o, cmd.OutOrStdout()) },
	}
	configFlag(cmd, &o.Config)
	f := cmd.Flags()
	f.BoolVar(&o.Own, "own", false, "start a fresh system of its own, even when one is configured")
	f.IntVar(&o.Pods, "pods", 300, "pods to request")
	f.DurationVar(&o.Duration, "duration", time.Minute, "how long the workload and the kills last")
	f.DurationVar(&o.KillInterval, "kill-interval", 5*time.Second, "time between two kills")
	f.StringVar(&o.Targets, "targets", "stages,store,nodeagent", "what may be killed: stages, store, nats, nodeagent")
	f.BoolVar(&o.Pause, "pause", false, "also SIGSTOP/SIGCONT processes")
	f.DurationVar(&o.PauseFor, "pause-for", 3*time.Second, "how long a paused process stays stopped")
	f.Uint64Var(&o.Seed, "seed", 0, "random seed (0: from the clock; printed)")
	f.IntVar(&o.Nodes, "nodes", 20, "simulated nodes (when starting its own system)")
	f.DurationVar(&o.Settle, "settle", 2*time.Minute, "how long to wait for every pod to settle after the chaos")
	f.StringVar(&o.Nemeses, "nemesis", "", "faults to inject, one every --kill-interval: "+strings.Join(chaos.NemesisNames, ",")+" (default kill, and pause with --pause); network faults need chaos to start its own system (no --config)")
	f.StringVar(&o.NetTargets, "nemesis-target", "store", "whose links the network faults cut: store (the raft links of the store replicas), nats (the route links of the 3 NATS servers of a --cluster system, which chaos then starts) or store,nats (in turn); oneway is for the store only")
	f.DurationVar(&o.FaultFor, "fault-for", 5*time.Second, "how long a network fault lasts before it heals")
	f.IntVar(&o.LinClients, "lin-clients", 4, "concurrent HTTPS clients of the linearizability checker (0: none)")
	f.IntVar(&o.LinKeys, "lin-keys", 5, "ConfigMaps those clients share")
	f.IntVar(&o.Hosts, "host-count", 0, "run a cluster of 3 hosts on loopback addresses 127.0.0.51-53 (up --init, up --join) and kill whole hosts: every process of one, every --kill-interval, started again --fault-for later (0: one host, the usual run)")
	f.IntVar(&o.MaxHostKills, "max-host-kills", 0, "with --host-count: at most this many host kills (0: as many as --duration allows)")
	f.StringVar(&o.Scenario, "scenario", "pods", "the workload: "+strings.Join(chaos.ScenarioNames, ", ")+"; rollout and job kill the replicas of their controllers (deployment and replicaset; job) and check their own invariants")
	f.IntVar(&o.MaxKills, "max-kills", 0, "with --scenario rollout or job: at most this many kills (0: as many as --duration allows)")
	f.IntVar(&o.ScaleTo, "scale-to", 2000, "with --scenario rollout: the spec.replicas the Deployment is scaled to during its rollout (it starts at a tenth)")
	f.IntVar(&o.Completions, "completions", 1000, "with --scenario job: the Job's completions")
	f.IntVar(&o.Parallelism, "parallelism", 50, "with --scenario job: the Job's parallelism")
	f.BoolVar(&o.Indexed, "indexed", false, "with --scenario job: an Indexed Job (each index must complete once)")
	f.BoolVar(&o.Keep, "keep", false, "keep the temporary system's data directory (its processes' logs), to read after a failed run")
	return cmd
}

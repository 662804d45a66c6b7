package main

import (
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/podflow/podflow/ops/bench"
	"github.com/podflow/podflow/services/pipeline"
)

// benchCommands are the `podflow bench` subcommands, registered by their
// own files with registerBench.
var benchCommands []func() *cobra.Command

func registerBench(f func() *cobra.Command) { benchCommands = append(benchCommands, f) }

func init() {
	registerBench(newBenchSchedulerCmd)
	registerBench(newBenchPipelineCmd)
	registerBench(newBenchScaleCmd)
	register(func() *cobra.Command {
		cmd := &cobra.Command{
			Use:   "bench",
			Short: "Benchmarks: medians and percentiles, never pass/fail",
		}
		for _, f := range benchCommands {
			cmd.AddCommand(f())
		}
		return cmd
	})
}

// newBenchSchedulerCmd is `podflow bench scheduler`.
func newBenchSchedulerCmd() *cobra.Command {
	o := &bench.SchedulerOptions{}
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Pods/s scheduled and bound by R scheduler replicas, with filter, score and bind times",
		Long: `Run in this process an embedded NATS JetStream server and a raftstore
cluster on loopback (in a temporary directory, removed afterwards), write
--nodes Ready nodes and --pods pending pods to the store, start --replicas
scheduler replicas, then publish a PodPersisted for every pod as fast as the
bus takes them and measure until every pod is bound: the rate (pods/s), the
filter, score and bind-commit times the PodScheduled events carry (p50, p99),
the lost bind races, and where the scheduling time went: each plugin's mean
time at each extension point over the sampled cycles (kube-scheduler's
scheduler_plugin_execution_duration_seconds, 10% of the cycles) with its
share, and the plugins' estimated time over all cycles as a share of the
process's cpu (wall times: on a busy machine an upper bound; --cpuprofile
for the rest: bus, store, GC). The shape of kube-scheduler's scheduler_perf
SchedulingBasic by default (nodes of 4 cpu, 32Gi, 110 pods; pods of 100m,
500Mi). --shape picks another of scheduler_perf's shapes; its --init-pods
(default: the shape's) are scheduled first, unmeasured:

  basic                no init pods (SchedulingBasic)
  topology-spreading   nodes over zones moon-1..3; init pods as basic, then
                       pods labelled color=blue with maxSkew 5 DoNotSchedule
                       on topology.kubernetes.io/zone (TopologySpreading;
                       scheduler_perf: 5000 nodes, 5000 init, 5000 pods)
  anti-affinity        init pods and pods labelled color=green with required
                       anti-affinity to color=green on the hostname
                       (SchedulingPodAntiAffinity: 5000 nodes, 1000 + 1000)
  preemption           init pods of priority 10 and 900m cpu fill the nodes,
                       pods of priority 100 and 3 cpu each preempt three
                       (PreemptionBasic: 500 nodes, 2000 init, 500 pods); a
                       stand-in for the node agents deletes the victims

Finally it checks that no pod was bound twice and no node overcommitted, and
the topology rules and preemption invariants, from the store's history.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.RunScheduler(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Nodes, "nodes", 5000, "nodes")
	f.IntVar(&o.Pods, "pods", 10000, "pods")
	f.IntVar(&o.Replicas, "scheduler-replicas", 1, "scheduler replicas")
	deprecatedAlias(f, "replicas", "scheduler-replicas", func(f *pflag.FlagSet) { f.IntVar(&o.Replicas, "replicas", 1, "") })
	f.IntVar(&o.StoreReplicas, "store-replicas", 3, "raftstore replicas")
	f.StringVar(&o.NodeCPU, "node-cpu", "4", "allocatable cpu of each node")
	f.StringVar(&o.NodeMemory, "node-memory", "32Gi", "allocatable memory of each node")
	f.IntVar(&o.NodePods, "node-pods", 110, "allocatable pod count of each node")
	f.StringVar(&o.PodCPU, "pod-cpu", "100m", "cpu request of each pod")
	f.StringVar(&o.PodMemory, "pod-memory", "500Mi", "memory request of each pod")
	f.IntVar(&o.Concurrency, "concurrency", 0, "handlers in flight per replica (default: the stage's, 64)")
	f.BoolVar(&o.NoSync, "store-nosync", false, "do not fsync the raft log (a throwaway store)")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the measured phase to this file")
	f.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up after this long")
	f.StringVar(&o.Shape, "shape", "basic", "scheduler_perf shape: basic, topology-spreading, anti-affinity or preemption")
	f.IntVar(&o.InitPods, "init-pods", -1, "pods scheduled before the measured ones (default: the shape's)")
	return cmd
}

// newBenchPipelineCmd is `podflow bench pipeline`.
func newBenchPipelineCmd() *cobra.Command {
	o := &bench.PipelineOptions{}
	cmd := &cobra.Command{
		Use:   "pipeline",
		Short: "End-to-end pods/s and PodRequested→Running latency, with the time spent per stage",
		Long: `Offer a steady load of PodRequested events (--rate per second, --pods in all)
to a podflow system with simulated nodes and report the throughput, the
PodRequested→Running latency (p50, p99) and, per stage, the time events
waited in the stream and the time the stage spent handling them — all
rebuilt from the JetStream stream alone. It ends with the cost per pod,
counted by the system itself: the CPU time of every process (from
/proc/<pid>/stat of the processes in children.json, and up's), the
JetStream messages stored, deliveries and acks (the NATS server's stream
and consumer counters), the store requests, raft log entries and fsyncs and
the watch events delivered (each store replica's status counters), from
the first request until every consumer has drained. It works on the
configured system (--config, else $PODFLOW_CONFIG, ./.podflow/config.json,
~/.podflow/config.json, as every command); with --own, or when none is
configured, it starts its own ` + "`podflow up`" + ` in a temporary directory (3 store
replicas, --nodes simulated nodes) and stops it afterwards. It says which,
and prints its progress while it waits.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.RunPipeline(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	configFlag(cmd, &o.Config)
	f := cmd.Flags()
	f.BoolVar(&o.Own, "own", false, "start a fresh system of its own, even when one is configured")
	f.IntVar(&o.Pods, "pods", 2000, "pods to request in all")
	f.IntVar(&o.Rate, "rate", 1000, "offered load, PodRequested events per second")
	f.IntVar(&o.Nodes, "nodes", 50, "simulated nodes (when starting its own system)")
	f.StringVar(&o.Replicas, "replicas", "", "stage replicas (when starting its own system), e.g. admission=2")
	f.BoolVar(&o.Keep, "keep", false, "keep the temporary system's data directory")
	f.StringVar(&o.CostJSON, "cost-json", "", "also write the cost table as JSON to this file")
	f.BoolVar(&o.Webhooks, "webhooks", false, "register a local mutating and a local validating admission webhook for every pod first (served by bench on 127.0.0.1: the system must run on this machine; removed at the end)")
	f.StringVar(&o.HeapProfiles, "heap-profile-dir", "", "every process of the system it starts writes a heap profile into this directory every 10s and when it stops (<role>-<pid>.heap; 'go tool pprof -sample_index=inuse_space -top FILE')")
	f.StringVar(&o.Profiles, "profile-dir", "", "every process of the system it starts writes a CPU profile of its life into this directory (<role>-<pid>.pprof; 'go tool pprof -top FILE')")
	return cmd
}

// newBenchScaleCmd is `podflow bench scale`.
func newBenchScaleCmd() *cobra.Command {
	o := &bench.ScaleOptions{}
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Pods/s with 1, 2, … replicas of one stage, each bounded to the same CPU, the rest held fixed",
		Long: `Run the whole system (as ` + "`podflow bench pipeline`" + ` does: its own ` + "`podflow up`" + `
with simulated nodes) once per replica count of --stage, alternating the
counts for --runs rounds, and bound every replica of that stage to
--stage-cpu CPUs in a cgroup of its own (podflow-bench-scale-<pid>/<replica>,
cgroup v2 cpu.max or v1 cpu.cfs_quota_us; removed at the end, also on
failure or interrupt). With one replica bounded the stage is the
bottleneck; a second gets as much CPU again, so the table shows what
adding a replica of the saturated stage buys when CPU is available.

Per run: pods/s, the stage's CPU ms per pod (all its replicas, from
/proc), the share of CFS periods its bound throttled, and its durable
consumer's pending and ack pending sampled during the run (what
` + "`podflow streams`" + ` shows); then the medians per replica count and every
consumer's peak pending. Needs root and a cgroup cpu controller; skips
otherwise.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Parse(); err != nil {
				return err
			}
			return bench.RunScale(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Stage, "stage", pipeline.Scheduler, "the stage to scale")
	f.StringVar(&o.Replicas, "replica-counts", "1,2", "replica counts of the stage to compare, e.g. 1,2,3")
	deprecatedAlias(f, "replicas", "replica-counts", func(f *pflag.FlagSet) { f.StringVar(&o.Replicas, "replicas", "1,2", "") })
	f.Float64Var(&o.StageCPU, "stage-cpu", 0.1, "CPUs each replica of the stage may use (its cgroup's CPU bound)")
	f.IntVar(&o.Pods, "pods", 3000, "pods to request per run")
	f.IntVar(&o.Rate, "rate", 1200, "offered load, PodRequested events per second")
	f.IntVar(&o.Nodes, "nodes", 100, "simulated nodes")
	f.IntVar(&o.Runs, "runs", 3, "runs of each replica count (alternating)")
	f.StringVar(&o.JSONOut, "json", "", "also write every run as JSON to this file")
	f.BoolVar(&o.Keep, "keep", false, "keep each run's data directory (its logs among them)")
	f.StringVar(&o.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the cgroup hierarchies are mounted")
	f.DurationVar(&o.Sample, "sample", 250*time.Millisecond, "how often the consumers are sampled during a run")
	return cmd
}

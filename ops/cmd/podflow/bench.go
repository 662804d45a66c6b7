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
		Long:  bench.SchedulerHelp,
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
	tokenVolume := true
	cmd := &cobra.Command{
		Use:   "pipeline",
		Short: "End-to-end pods/s and PodRequested→Running latency, with the time spent per stage",
		Long:  bench.PipelineHelp,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.NoTokenVolume = !tokenVolume
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
	f.BoolVar(&o.SLO, "slo", false, "then create pods with client-go through the HTTPS API and report Kubernetes' SLOs: mutating API call latency and pod startup latency (created → Running, watched), p50/p99")
	f.IntVar(&o.SLOPods, "slo-pods", 0, "pods the --slo pass creates (default: --pods)")
	f.IntVar(&o.SLORate, "slo-rate", 0, "creates per second of the --slo pass (default: 80% of the pods/s the pipeline pass reached)")
	f.StringVar(&o.SLOJSON, "slo-json", "", "also write the --slo figures as JSON to this file")
	f.BoolVar(&tokenVolume, "token-volume", true, "the pods keep Kubernetes' default automountServiceAccountToken: each mounts a projected volume with its ServiceAccount's bound token and the kube-root-ca.crt ConfigMap (false: automountServiceAccountToken false, no such volume)")
	return cmd
}

// newBenchScaleCmd is `podflow bench scale`.
func newBenchScaleCmd() *cobra.Command {
	o := &bench.ScaleOptions{}
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Pods/s with 1, 2, … replicas of one stage, each bounded to the same CPU, the rest held fixed",
		Long:  bench.ScaleHelp,
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

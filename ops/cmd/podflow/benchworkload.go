package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/bench"
)

func init() { registerBench(newBenchWorkloadCmd) }

// newBenchWorkloadCmd is `podflow bench workload`.
func newBenchWorkloadCmd() *cobra.Command {
	o := &bench.WorkloadOptions{}
	cmd := &cobra.Command{
		Use:   "workload",
		Short: "A Deployment of N pods: time until available, then a rolling update until complete",
		Long:  bench.WorkloadHelp,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.RunWorkload(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	configFlag(cmd, &o.Config)
	f := cmd.Flags()
	f.BoolVar(&o.Own, "own", false, "start a fresh system of its own, even when one is configured")
	f.IntVar(&o.Replicas, "pods", 10000, "pods of the Deployment (its spec.replicas)")
	f.IntVar(&o.Nodes, "nodes", 100, "simulated nodes (when starting its own system)")
	f.IntVar(&o.Runs, "runs", 3, "rounds of create, rollout and delete")
	f.StringVar(&o.StageReplicas, "replicas", "", "stage replicas (when starting its own system), e.g. admission=2,replicaset=2")
	f.StringVar(&o.MaxSurge, "max-surge", "25%", "the Deployment's rollingUpdate.maxSurge")
	f.StringVar(&o.MaxUnavailable, "max-unavailable", "25%", "the Deployment's rollingUpdate.maxUnavailable")
	f.BoolVar(&o.Keep, "keep", false, "keep the temporary system's data directory")
	f.StringVar(&o.Profiles, "profile-dir", "", "every process of the system it starts writes a CPU profile of its life into this directory (<role>-<pid>.pprof; 'go tool pprof -top FILE')")
	f.BoolVar(&o.NoToken, "no-token", false, "automountServiceAccountToken: false in the pods (no token volume, no token request per pod)")
	f.BoolVar(&o.NoRollout, "no-rollout", false, "skip the rolling update: time the create until available only")
	f.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "give up after this long")
	return cmd
}

// Package bench holds podflow's benchmarks (`podflow bench`): figures,
// medians and percentiles, never pass or fail.
//
//   - RunScheduler: scheduler replicas in this process against an
//     embedded NATS server and raft store (services/stages/scheduler's
//     schedsim), kube-scheduler's scheduler_perf shapes; pods/s, filter,
//     score and bind times, each plugin's share.
//   - RunPipeline: end-to-end pods/s and PodRequested→Running latency of a
//     whole system, with each stage's wait and handling time rebuilt from
//     the stream, and the cost per pod (CPU of every process, messages,
//     store requests, fsyncs).
//   - RunScale: the same with 1, 2, … replicas of one stage, each replica
//     bounded to the same CPU in a cgroup of its own.
//
// StartProfile writes a CPU profile of a whole podflow process when
// ProfileDirEnv names a directory (RunPipeline's Profiles sets it for the
// system it starts).
//
// The caller runs them from the podflow binary: RunPipeline and RunScale
// start this executable's `podflow up` (ops/processes/up.SystemUnderTest).
//
// Example:
//
//	err := bench.RunPipeline(ctx, &bench.PipelineOptions{Pods: 2000, Rate: 1000, Nodes: 50}, os.Stdout)
package bench

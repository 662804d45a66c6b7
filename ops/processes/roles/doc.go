// Package roles holds the entry function of each podflow process role, so
// that the `podflow` command is a thin layer of flags over them:
//
//   - NATS: the embedded NATS JetStream server, one restricted user per role;
//   - StoreReplica: one raftstore replica;
//   - Registry: the OCI registry the Linux node agents pull from;
//   - Stage: one replica of a lifecycle stage (api, admission, persistence,
//     scheduler, status, endpoints);
//   - SimNodes and LinuxNode: the node agents (simulated nodes, or one
//     real node on this machine).
//
// Each runs until its ctx is done and returns nil on a clean stop. The
// caller:
//  1. fills the role's options (StageOptions, SimNodesOptions,
//     LinuxNodeOptions; the configurations of bus, raftstore and registry
//     for the others),
//  2. runs the function with a ctx that is cancelled on SIGTERM, so that
//     the role drains (a stage stops pulling and finishes what it holds).
//
// The processes that `podflow up` runs are described by ops/processes/plan, whose
// arguments are these commands' flags.
//
// Example:
//
//	err := roles.Stage(ctx, "scheduler", roles.StageOptions{Config: cfgPath, Replica: "scheduler-1", Resync: 10 * time.Second})
package roles

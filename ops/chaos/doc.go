// Package chaos is `podflow chaos`: a pod workload run against a podflow
// system while its processes are killed, paused and cut off from each
// other, then an invariant checker over what the system kept.
//
// Run starts the system (its own `podflow up`, with relays on the store's
// raft links and the NATS routes when network faults are asked for:
// ops/nemesis), publishes the pods, injects one fault every
// Options.KillInterval among Options.Nemeses (kill, pause, partition,
// leader, bridge, oneway, latency, flap, cutkill, loss), and meanwhile
// drives ConfigMaps over the HTTPS API from several clients, recording
// the history (lin.go), and follows the store with watches. Once the
// faults stop it waits for the pods to settle and checks (check.go):
// every acknowledged pod Running and Ready or refused with a code; no pod
// bound twice, no node overcommitted, no pod IP given twice, every node's
// accounting matching its pods; every durable consumer drained; the store
// replicas agreeing; each watch without gaps, duplicates or reordering;
// the register history linearizable (porcupine); every faulted link
// relayed. Runs are seeded, so a failing one replays.
//
// With Options.Scenario rollout or job (scenario.go), the workload is a
// Deployment rolled out and scaled, or a Job of many completions, driven
// over the Kubernetes API while replicas of its controllers are killed;
// watches record every version of its objects and the scenario's
// checkers replay them (rollout.go: checkRollout, checkOwners; job.go:
// checkJob, checkFinalizers).
//
// It does I/O of every kind: child processes, signals, network relays,
// the bus, the store and the HTTPS API.
//
// The caller:
//  1. runs Run from the podflow binary (its own system is this executable's
//     `podflow up`);
//  2. treats an error with ExitCode 2 as an invariant broken, anything
//     else as a run that could not be made.
//
// Example:
//
//	o := &chaos.Options{Pods: 300, Duration: time.Minute, KillInterval: 5 * time.Second, Targets: "stages,store",
//		NetTargets: "store", FaultFor: 5 * time.Second, Nodes: 20, Settle: 2 * time.Minute, LinClients: 4, LinKeys: 5}
//	err := chaos.Run(ctx, o, os.Stdout)
package chaos

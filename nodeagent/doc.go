// Package nodeagent is podflow's kubelet: the runtime-independent core of
// the node agent. One Agent runs per node. It registers and heartbeats the
// node's Node object and runs one worker goroutine per pod bound to the
// node, which drives the pod through a Runtime (package sim, or a Linux
// runtime) as kubelet does, with kubelet's reasons and messages. Each file
// documents one concern (env.go, volumes.go, projected.go, satoken.go,
// emptydir.go, images.go, ephemeral.go, hooks.go, probe.go, ...).
//
// # The pod worker
//
// A worker is shaped like kubelet's pod workers (pod_workers.go) and moves
// its pod through three states, one step at a time (worker.go draws the
// state machine):
//
//	syncing ──deleted──▶ terminating ──containers stopped──▶ terminated ──▶ gone
//
// The states:
//
//   - syncing (syncPod): bring the pod to its spec, again on every
//     container exit, timer and pod update;
//   - terminating (syncTerminatingPod): preStop hooks, SIGTERM, kill after
//     the grace period, sidecars last;
//   - terminated (syncTerminatedPod): remove the sandbox, report the last
//     status, leave a tombstone (a late bind of the uid starts nothing),
//     publish PodDeleted.
//
// A pending delete wins over further syncing. Every step ends with the
// worker's reporter (reporter.go) publishing, in order and with
// deterministic ids, a PodStatusReport carrying the pod's status and its
// Kubernetes Events and the steps that led to it (PodRunning, PodReady, ...),
// then the lifecycle events no report carries (PodFailed, ...).
//
// # Callers
//
//  1. Build the agent with New(cfg, runtime, store, publisher), cfg from
//     DefaultConfig. The NodeStore and Publisher are used by every worker at
//     once and must be safe for concurrent use; Publish returns once the
//     envelope is durable.
//  2. Call Run(ctx), or Start once and then Heartbeat and Reconcile on your
//     own schedule (sim.Cluster does, for thousands of nodes).
//  3. Call HandlePodBound for every PodScheduled to this node and
//     HandlePodDelete for every deletion. Both are idempotent; Reconcile
//     heals a lost event from the store.
//  4. Call Stop when done: the pods keep running in the runtime, and the
//     next agent on the node adopts them at Start.
//
// Concurrency: every exported method of Agent is safe for concurrent use.
// A pod's Runtime calls come from its worker only, so a Runtime must be
// safe across pods, not within one.
//
// Example:
//
//	rt, _ := sim.New(sim.DefaultConfig("10.244.1.0/24"))
//	a, err := nodeagent.New(nodeagent.DefaultConfig("node-1", "10.244.1.0/24"), rt, store, pub)
//	if err != nil {
//		return err
//	}
//	go a.Run(ctx)                    // heartbeats and reconciles until ctx ends
//	err = a.HandlePodBound(ctx, pod) // from the PodScheduled consumer
package nodeagent

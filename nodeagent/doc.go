// Package nodeagent is podflow's kubelet: the runtime-independent core of the
// node agent. One Agent runs per node. It registers the node's Node object,
// heartbeats it, and runs one worker goroutine per pod bound to the node.
// A worker drives its pod as the kubelet does — sandbox, volumes, image pulls
// (by imagePullPolicy), init containers in order, sidecars (init
// containers with restartPolicy Always), app containers, startup, liveness
// and readiness probes, postStart and preStop hooks, restarts by
// restartPolicy with CrashLoopBackOff, ImagePullBackOff, retried
// FailedMount and FailedCreatePodSandBox, graceful termination — through a
// Runtime: the simulated one in package sim, or a Linux runtime.
//
// The core also makes each container's configuration as kubelet does
// (env.go): envFrom and env with valueFrom (ConfigMaps and Secrets read
// from the store, the downward API's fieldRef and resourceFieldRef) and
// $(VAR) expansion of env, command and args; the Runtime receives the
// final values and expands nothing. A source it cannot read is a
// CreateContainerConfigError with kubelet's message. downwardAPI volumes
// (volumes.go) resolve their items with the same fieldRef and
// resourceFieldRef code, paths checked as kubelet's atomic writer checks
// them; the Runtime writes the files. projected volumes (projected.go)
// are kubelet's collectData: configMap, secret and downwardAPI sources in
// one payload, with each file's mode resolved (VolumeData.Modes). A
// serviceAccountToken source (satoken.go) is a bound token of the pod's
// ServiceAccount that the NodeStore's optional TokenRequester asks the api
// stage for; the worker keeps it and asks again at the first sync after
// it is older than 80 % of its lifetime or 24 h (kubelet's token
// manager). While
// the pod runs, its worker re-resolves its configMap, secret, downwardAPI
// and projected volumes every
// Config.SyncPeriod and at once after a pod update (new labels or
// annotations handed over by HandlePodBound, as a reconcile does), and
// mounts again the volumes whose files changed. emptyDir volumes
// (emptydir.go): a medium Memory one is sized as kubelet sizes it
// (VolumeData.MemorySize), and so is the tmpfs under a secret, downwardAPI
// or projected volume (kubelet's wrapping memory emptyDir, without a
// sizeLimit); one with a sizeLimit is measured every
// Config.EvictionPeriod through the Runtime's optional VolumeMeter, and a
// pod whose usage is above the limit is evicted as kubelet's eviction
// manager evicts it (Warning Evicted, Failed, reason Evicted). A pod
// update that changes a container's image (images.go) restarts that container with it, as
// kubelet restarts a container whose spec hash changed.
// Ephemeral containers (ephemeral.go, kubectl debug) handed over by
// HandlePodBound are started once, whatever the restartPolicy and whether
// or not the pod is initialized, never restarted, and reported in
// status.ephemeralContainerStatuses; with targetContainerName the runtime's
// optional EphemeralStarter starts one in its target's PID namespace.
//
// # The pod worker
//
// A worker is shaped like kubelet's pod workers (pkg/kubelet/pod_workers.go)
// and moves its pod through three states, one step each (worker.go draws
// the state machine):
//
//   - syncing (syncPod): bring the pod to its spec, step by step, again on
//     every container exit and timer. Init containers run in order; a
//     sidecar lets the next start once it has started (startup probe
//     passed, postStart returned) and is restarted whenever it exits. A
//     finished pod (Succeeded or Failed, nothing to restart) has its
//     sidecars stopped and stays here with its sandbox released.
//   - terminating (syncTerminatingPod): once deleted, every preStop hook,
//     then SIGTERM to every running container but the sidecars in
//     parallel, kill after grace; then the sidecars, last first, within
//     what is left of the grace (hooks.go); PodKilled.
//   - terminated (syncTerminatedPod): stop and remove the sandbox (IP,
//     volumes, cgroups), the last status report, a tombstone in the agent,
//     PodDeleted. Then the worker is gone.
//
// The tombstone (tombstones.go) makes a bind of that uid a no-op for 10
// minutes (two resync periods if longer; at most 64k tombstones, the
// oldest dropped first): a PodScheduled redelivered after the deletion,
// read from a replica still showing the pod undeleted, starts nothing.
//
// A pending delete wins over further syncing. Every retried operation (the
// sandbox, the volumes, each container's restarts and image pulls) keeps
// one retry schedule under its Config Backoff. A worker gets what it needs
// of its node in a workerDeps (config, runtime, the store's ConfigMaps and
// Secrets, publisher, clock, logger), never the Agent itself.
//
// # The status reporter
//
// Each worker has a reporter, its outbox (reporter.go): the worker records
// Kubernetes Events and queues lifecycle events as things happen; after
// every step the reporter numbers them and publishes them in order, keeping
// what failed for the next try, same envelopes, same ids. When anything
// changed it publishes a PodStatusReport carrying the pod's whole status and
// the Kubernetes Events (Pulling, Pulled, Created, Started, Killing,
// BackOff, Unhealthy, FailedMount, ...), followed by the specific lifecycle
// events (PodSandboxReady, ImagePulled, ContainerStarted, ContainerExited,
// PodRunning, PodReady, PodNotReady, PodFailed, PodKilled, PodDeleted).
// The steps no stage consumes (eventsv1.Steps: PodSandboxReady,
// ImagePulling, ImagePulled, ContainerStarted, PodRunning) that come right
// behind the report travel inside it (PodStatusReport.steps), each with its
// own id and the time it happened (Emit's), and eventsv1.Unfold gives the
// readers of the stream (trace, console, bench) the same events in the same
// order: a pod's start is one message for the five
// (TestReporterFoldsSteps).
// Envelopes carry stage "nodeagent", replica and node_name = the node, and
// generation = the report's seq: a per-pod number that only grows, also
// across agent restarts (it is at least the wall clock in nanoseconds). The
// events after a report carry that report's seq, so a consumer acting on one
// can wait until the store reflects the report. Ids are deterministic —
// "uid/<pod uid>/<type>/g<seq>/a1" as eventsv1.EventID makes them, "/<n>"
// appended to the n-th further event of one type after one report, and
// "uid/<pod uid>/PodDeleted" for the last one — so a retried publish is
// deduplicated by JetStream.
//
// # Callers
//
// Callers must:
//
//  1. Build the agent with New(cfg, runtime, store, publisher), cfg from
//     DefaultConfig and adjusted; the Publisher and NodeStore are small
//     interfaces the caller adapts to the bus and the store. Both are used
//     by every pod's worker at once, so both must be safe for concurrent
//     use. Publish returns only once the envelope is durable; a failed one
//     is retried, with the same id, every Config.PublishRetry.
//  2. Either call Run(ctx), which registers the node and then heartbeats and
//     reconciles until ctx ends, or call Start once and drive Heartbeat and
//     Reconcile themselves (sim.Cluster does, for thousands of nodes).
//  3. Call HandlePodBound for every PodScheduled to this node and
//     HandlePodDelete for every deletion. Both are idempotent; a lost event
//     is healed by Reconcile, which compares the workers with the pods the
//     store binds to the node.
//  4. Call Stop when done. Stop leaves the pods running in the runtime; the
//     next agent on the node adopts them at Start.
//
// Example:
//
//	rt, _ := sim.New(sim.DefaultConfig("10.244.1.0/24"))
//	a, err := nodeagent.New(nodeagent.DefaultConfig("node-1", "10.244.1.0/24"), rt, store, pub)
//	if err != nil {
//		return err
//	}
//	go a.Run(ctx) // heartbeats, resyncs; Stop on ctx.Done
//	err = a.HandlePodBound(ctx, pod) // from the PodScheduled consumer
//
// Concurrency: every exported method of Agent is safe for concurrent use.
// A pod's Runtime calls are made from its worker only, so a Runtime needs to
// be safe across pods, not within one.
package nodeagent

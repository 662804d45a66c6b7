// Package sim is a simulated container runtime for the node agent, like
// KWOK: sandboxes, images and containers exist only in memory, pod IPs come
// from the node's pod CIDR (never handed out twice, released when the sandbox
// is removed) and nothing touches the network. Delays are configurable, zero
// included. A Cluster runs thousands of simulated nodes in one process, each
// an nodeagent.Agent over its own Runtime, with one loop heartbeating and
// reconciling them all.
//
// Failures are injected per pod by annotations:
//
//	sim.podflow.io/image-pull: fail     every pull fails: ErrImagePull, then ImagePullBackOff
//	sim.podflow.io/sandbox: fail        sandbox creation fails: FailedCreatePodSandBox
//	sim.podflow.io/mount: fail          volume mounts fail: FailedMount, containers ContainerCreating
//	sim.podflow.io/readiness: fail      readiness probes fail: Running, Ready=False (ContainersNotReady)
//	sim.podflow.io/liveness: fail       liveness probes fail: the container is killed and restarted
//	sim.podflow.io/startup: fail        startup probes fail: likewise
//	sim.podflow.io/exit-after: 2s       app containers exit on their own after 2s ...
//	sim.podflow.io/exit-code: 1         ... with this code (default 0): CrashLoopBackOff, Completed, Failed by restartPolicy
//	sim.podflow.io/ignore-sigterm: true containers ignore SIGTERM and are killed (137) when the grace period ends
//	sim.podflow.io/init-exit-code: 1    init containers exit with this code: Init:CrashLoopBackOff, or Failed under Never
//	sim.podflow.io/post-start: fail     postStart hooks (exec, httpGet) fail: FailedPostStartHook, the container killed
//	sim.podflow.io/pre-stop: fail       preStop hooks (exec, httpGet) fail: FailedPreStopHook, the stop goes on
//	sim.podflow.io/sidecar-exit-after: 1s  sidecars (init containers with restartPolicy Always) exit 1 after 1s: restarted
//	sim.podflow.io/teardown: 3          the first 3 sandbox removals fail ("fail": all of them): FailedKillPod, retried
//	sim.podflow.io/termination-message: text  what each container wrote at its terminationMessagePath when it exits
//	sim.podflow.io/log: "a\nb\n"        what each container logged (FallbackToLogsOnError reads its end)
//
// Probe annotations take effect on containers that declare that probe; the
// kubelet core only runs probes a container declares. Without an annotation
// every probe succeeds. A mount also fails, without any annotation, when a
// configMap or secret volume refers to an object missing from the store (the
// agent core resolves them). Init containers exit 0 after
// Config.InitRunTime; sidecars run like app containers. A container stopped by the agent exits 143 (SIGTERM)
// after Config.StopDelay, or 137 (SIGKILL) when the grace period is shorter
// or the pod ignores SIGTERM.
//
// Callers must:
//
//  1. Give each runtime its own pod CIDR (Cluster does: node i gets block i
//     of ClusterConfig.ClusterCIDR cut into NodeCIDRMaskSize blocks, so
//     with 10.244.0.0/16 and /24 sim-node-0001 has 10.244.1.0/24).
//  2. Close a Runtime (or Stop a Cluster) when done, so that pending
//     simulated exits are cancelled.
//
// Example:
//
//	cfg := sim.DefaultClusterConfig(1000) // sim-node-0001 ... sim-node-1000
//	c, err := sim.NewCluster(cfg, store, pub)
//	if err != nil {
//		return err
//	}
//	if err := c.Start(ctx); err != nil { // registers every node
//		return err
//	}
//	defer c.Stop()
//	err = c.HandlePodBound(ctx, pod) // routed by pod.spec.nodeName
package sim

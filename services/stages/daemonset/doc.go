// Package daemonset is kube-controller-manager's DaemonSet controller
// (pkg/controller/daemon) as a podflow controller stage: one pod of each
// DaemonSet on every node that should run it.
//
// The decisions are kube's own code, not a rewrite: kube_update.go is kube
// v1.37.2's update.go (the rolling update with maxUnavailable or
// maxSurge, the ControllerRevision history: constructHistory, snapshot,
// dedupCurHistories, cleanupHistory) with only its receiver type renamed,
// and kube_daemon.go is daemon_controller.go's nodeShouldRunDaemonPod
// (nodeName, nodeSelector, required node affinity, taints against the
// template's tolerations and kube's default daemon tolerations),
// podsShouldBeOnNode, manage, updateDaemonSet and the status
// computation, over kube's daemon/util library. What they call on kube's
// DaemonSetsController — its client, listers, ControllerRevision control,
// expectations and event recorder — this package implements over
// podflow's store (client.go); controller.go is kube's syncDaemonSet and
// its informer handlers on the services/controller framework, and
// pods.go kube's getDaemonPods and syncNodes the podflow way:
//
//  1. A daemon pod is created through the pipeline (controller.Pods: the
//     api stage authorizes it as the controller's ServiceAccount, then
//     admission and persistence, the same trace as a user's pod), from
//     the template with the controller-revision-hash label, kube's default
//     tolerations and a required node affinity naming its node
//     (util.ReplaceDaemonSetPodNodeNameNodeAffinity); the scheduler binds
//     it there.
//  2. Its name is derived from the DaemonSet's uid, the node, the template
//     hash and a slot (PodName): every replica derives the same name, so a
//     creation asked twice — a retry after no answer, the next owner after
//     a replica was killed mid-sync — makes one pod (persistence creates a
//     pod only if its name is free).
//  3. Every write — a pod created, deleted, adopted or released, a
//     ControllerRevision, the status — is compared on the revision it was
//     decided from and expected (controller.Runner.Expect) by the
//     DaemonSet being synced, whose next sync decides only from informers
//     that show it: kube's expectations and consistency store, exact.
//  4. A pod bound to a node that no longer exists is deleted from the
//     store at once (kube leaves it to its pod garbage collector, which
//     podflow does not run).
//
// The caller (`podflow stage daemonset`, ops/processes/roles) runs it as a
// controller stage with the stage's identity (pipeline.DaemonSet: it
// writes DaemonSets' status, ControllerRevisions, pods, Events and Leases,
// and asks the api stage for pods):
//
//	c, err := daemonset.New(env, daemonset.DefaultConfig(replica), controller.NATSRequester(env.NATS))
//	err = stage.Run(ctx, conn, env, c, stage.Config{NoConsumer: true, ResyncPeriod: 30 * time.Second})
package daemonset

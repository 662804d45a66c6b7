// Package framework is the scheduler's framework, after kube-scheduler's
// pkg/scheduler/framework: the extension points a plugin implements
// (framework.go), Status and its codes, the per-cycle CycleState,
// NodeInfo (a node and the pods on it as the plugins read them), Snapshot
// (a consistent view of the cache for one cycle), PodMeta and the parsed
// label selectors and affinity terms of the pod-aware plugins, the pods'
// resource requests, FitError, and the plugin Registry. It does no I/O and
// holds no goroutine: a cache (package cache) fills NodeInfos and
// Snapshots, a Scheduler (package scheduler) runs plugins (package
// plugins) over them.
//
// # A cycle
//
// Scheduling is kube-scheduler's framework (framework.go, after
// pkg/scheduler/framework/interface.go). A plugin implements only the
// extension points it needs; a cycle runs them in this order:
//
//  1. PreFilter, once: the plugin computes its view of the pod — its
//     requests, its host ports, its node selector and required affinity
//     parsed once — into the CycleState, or returns Skip (nothing to
//     check: its Filter is not called this cycle), a rejection (every
//     node fails, with kube-scheduler's "0/N nodes are available: <msg>.")
//     or an error (the cycle fails).
//  2. Filter, per node, from where the previous cycle stopped, until
//     numFeasibleNodesToFind feasible nodes are found; the first filter
//     that rejects a node decides its reasons, and the reasons are
//     counted into the *FitError's message, kube-scheduler's word for
//     word ("0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had
//     untolerated taint {dedicated: gpu}."). The nodes go to the filters
//     in chunks (up to 512, never more than the feasible nodes still
//     wanted, so that a cycle evaluates exactly the nodes it would one by
//     one): a plugin that also implements BatchFilter (every in-tree
//     filter) checks a chunk in one call (FilterNodes, given the verdicts
//     so far: it checks only the nodes the filters before it passed),
//     others are called per node.
//  3. PreScore, once, with the feasible nodes (Skip: the plugin scores 0).
//  4. Score, per feasible node (or ScoreNodes, once per chunk of 64, for a
//     plugin that also implements BatchScorer; every score plugin runs on
//     a chunk before the next, while its nodes are in the CPU cache), then
//     NormalizeScore for a plugin with ScoreExtensions; the weighted sum
//     picks the node, ties broken at random.
//  5. PostFilter, only when no node passed: the plugins (DefaultPreemption)
//     run with every node's rejection and a Handle that runs the cycle's
//     filters on a modified copy of a node; a success nominates the pod
//     (FitError.Nomination), a rejection's message is appended to the
//     FailedScheduling message ("... preemption: ...").
//
// A pod nominated to a node (status.nominatedNodeName) is tried there
// first; and every filter verdict that passes a node with nominated pods
// of at least the pod's priority is checked again with those pods counted
// (kube-scheduler's RunFilterPluginsWithNominatedPods), so the room a
// preemption made is kept for its preemptor (Cache.Nominate).
//
// The in-tree plugins (package plugins), one package each, in the default profile's order
// (DefaultPlugins): NodeUnschedulable, NodeName, TaintToleration (filter:
// NoSchedule and NoExecute, with a node whose Ready condition is not True
// treated as tainted node.kubernetes.io/not-ready:NoSchedule, or
// unreachable when it is Unknown; score: PreferNoSchedule, weight 3),
// NodeAffinity (filter: spec.nodeSelector and required affinity; score:
// preferred, weight 2), NodePorts, NodeResourcesFit (filter, and the
// LeastAllocated score, weight 1), PodTopologySpread (filter:
// DoNotSchedule constraints; score: ScheduleAnyway, weight 2),
// InterPodAffinity (filter: required pod affinity and anti-affinity, and
// the existing pods' required anti-affinity; score: preferred terms both
// ways, weight 2), NodeResourcesBalancedAllocation (weight 1) and
// ImageLocality (weight 1). Config.Weights sets the default profile's
// weights; Config.Plugins and Config.Registry replace the profile.
//
// The pod-aware plugins read each node's pods from NodeInfo.pods (their
// namespace, labels and parsed pod affinity terms, podselector.go) and
// count matching pods per topology domain once per cycle, in PreFilter
// and PreScore, over the whole snapshot. They skip in O(1) what most pods
// need not pay for: PodTopologySpread a pod without constraints of the
// kind; InterPodAffinity's filter a pod without required terms while no
// pod in the cache has required anti-affinity, its score a pod without
// preferred terms while no pod has any (the cache counts those pods).
// Namespace labels, for namespaceSelector, come from Cache.SetNamespace.
// DefaultPreemption (defaultpreemption.go) is kube-scheduler's: victims
// only of lower priority, the fewest by reprieving the most important
// first, the node by the lowest highest-priority victim, then the lowest
// sum of priorities, the fewest victims, the latest start; preemptionPolicy
// Never does not preempt, nor a nominated pod whose victims are still
// terminating. A pod without spread constraints of its own is scored by
// kube-scheduler's system default constraints (maxSkew 3 by hostname, 5
// by topology.kubernetes.io/zone, ScheduleAnyway) over the pods the
// Services selecting it select (Cache.SetService; the stage watches
// Services). Not modelled: default constraints from ReplicaSets,
// StatefulSets and ReplicationControllers (podflow serves none), and
// updating PodTopologySpread's and InterPodAffinity's counts during the
// preemption dry run. PodDisruptionBudgets (Snapshot.PDBs, from
// Cache.SetPDB; the stage watches them) make preemption spare the
// victims that would violate one first, and prefer the node with the
// fewest such victims before any priority criterion.
//
// Plugin timing: scheduler_plugin_execution_duration_seconds{plugin,
// extension_point, status} (pluginmetrics.go; Scheduler.SetPluginMetrics,
// registered by Stage.RegisterMetrics) observes, on 10% of cycles drawn
// at random (kube-scheduler's pluginMetricsSamplePercent), each plugin
// once per extension point it ran at: a batch point's time summed over
// its chunks, Filter labelled with the most severe code it gave a node.
// An unsampled cycle pays a nil check per plugin call.
//
// Adding a plugin is one package under plugins/:
// a type with Name and the extension points it needs, its per-cycle data
// under a NewStateKey key written by its PreFilter or PreScore, its
// rejections as Statuses built once (a filter that allocates per node
// slows every cycle), BatchFilter and BatchScorer if it is on by default
// (the decision core may not lose more than 5% on
// BenchmarkScheduleAndAssume10000Pods: keep the common case in the batch
// loop without a call per node, and the per-node logic in one copy — a
// helper both methods call, or Score calling ScoreNodes with one node), a
// line in plugins.InTreeRegistry and, if it is on by default, in the
// scheduler's DefaultPlugins
// with its weight; its score shows in NodeScore.Plugins. Data several
// plugins need (the pod's requests: ReadPodResources) is computed once
// per cycle through ReadState.
//
// Concurrency contract: a Scheduler, its plugin instances and its
// CycleState belong to one goroutine and run one cycle at a time. Plugins
// keep nothing between cycles (a cycle's data lives in its CycleState) and
// only read the pod, the NodeInfos and the Snapshot.
//
// Example, a filter plugin (see plugins/nodeports for a whole one):
//
//	type Example struct{}
//
//	func (Example) Name() string { return "Example" }
//
//	func (Example) Filter(_ *framework.CycleState, pod *corev1.Pod, n *framework.NodeInfo) *framework.Status {
//		if n.Unschedulable() {
//			return framework.NewStatus(framework.UnschedulableAndUnresolvable, "node(s) were unschedulable")
//		}
//		return nil
//	}
package framework

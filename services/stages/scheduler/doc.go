// Package scheduler is podflow's scheduler stage, kube-scheduler's
// scheduling cycle and binder: Stage consumes the pods persistence stored,
// decides with a Scheduler over a cache snapshot, and binds each pod with
// one store transaction. Its parts live in subpackages:
//
//   - framework: the extension points, Status, CycleState, NodeInfo,
//     Snapshot and the plugin Registry (pure: no I/O);
//   - plugins/<name>: the in-tree plugins, one package each, and
//     plugins.InTreeRegistry (no I/O);
//   - cache: the nodes and the pods on them, cheap snapshots, and the
//     NodeAllocation records a bind re-checks (no I/O: fed by its caller);
//   - this package: the Scheduler that runs a profile's plugins over a
//     snapshot (schedule.go, profile.go: no I/O), and the Stage around it
//     (stage.go, bind.go, preempt.go, domainguard.go, affinityanchor.go,
//     reservation.go), which does the I/O: informers on the store, the bind
//     and preemption transactions, events on the bus, metrics.
//
// Scheduling is kube-scheduler's framework (see package framework for a
// cycle's order and how a plugin is written).
//
// # The stage
//
// Stage wraps the core as the pipeline's scheduler stage (run it with
// stage.Run). Its parts:
//
// Sharing work. Every replica reads the one durable "scheduler" consumer
// (PodPersisted, PodDeleted), so JetStream hands each event to one replica;
// each replica keeps its own Cache, fed by store watches (nodes, pods,
// NodeAllocations) through informers, and decides under its own lock, one
// pod at a time, assuming the pod onto the chosen node before the next
// decision. Replicas do not talk to each other: the store arbitrates. The
// pod informer keeps an unbound pod whole (it is scheduled and written
// back from that copy) and a bound one with only what scheduling reads
// of it (podinformer.go: requests, ports, labels, affinity, priority,
// identity, deletion, phase, nomination).
//
// The bind transaction. Binding is one raftstore transaction that
//
//   - compares the pod's revision (still the unbound pod the decision saw)
//     and the node's NodeAllocation revision (still the record the fit was
//     re-checked against with CheckAllocationFit, which counts the room
//     reserved there for nominated pods of at least the pod's priority;
//     revision 0: no record yet), and
//   - puts the pod with spec.nodeName and PodScheduled=True, the
//     NodeAllocation with the pod accounted under its uid (and its own
//     reservation, if any, released — on the node it was nominated to as
//     well, when it binds elsewhere), and the pod's Scheduled Event (named
//     after the pod's uid and node, so it needs no read).
//
// A pod that Succeeded or Failed counts on no node, as kube-scheduler's
// informer lists no terminal pod: the cache drops it, the status stage
// releases it from its node's record with the report that finishes it,
// and a bind the record refuses releases, in its own transaction, the
// finished pods the record still holds (made terminal by another writer,
// a client's pods/status).
//
// So a pod is bound at most once (a second bind's pod compare fails) and a
// node is never overcommitted (every bind to it compares the record it
// checked). The first attempt reads nothing: the pod comes from the event
// or the pod informer (the newer), the allocation from the informer or
// what this replica last wrote or read (the newer); the compares catch a
// stale copy. This replica's binds to one node are serialized (striped
// locks), so they do not race each other for the node's record.
//
// Conflicts. A lost race — a failed compare, an allocation that no
// longer fits, or one that accounts for a pod the decision did not see on
// the node (the allocation informer ahead of the pod informer:
// InterPodAffinity and PodTopologySpread read pods from the cache, so two
// pods with hostname anti-affinity could otherwise share a node;
// sawAllocated) — is counted (Counters.Conflicts, and PodScheduled.conflicts
// in the pod's trace) and retried at once against fresh state: after a pod
// compare the pod is read from the store; after an allocation compare the
// record is read and the replica waits (up to CacheSyncTimeout) until its
// pod informer has reached that record's revision, at which point its
// cache holds every pod the record accounts for (the transaction that
// wrote the record wrote the pod at the same revision). A handling gives up
// after MaxAttempts lost races and the event is retried with the runner's
// backoff. Every failed attempt forgets the assumed pod. PodScheduled's id
// is the same for every attempt and replica, so a redelivered event of a
// pod already bound re-publishes it harmlessly (JetStream deduplicates).
//
// Rules over a domain wider than a node (domainguard.go). A zone-wide
// rule — a DoNotSchedule spread constraint or a required pod
// anti-affinity term on another key than the hostname
// (topology.kubernetes.io/zone) — is guarded by records per domain, one
// for each writer (a scheduler process): DomainRecordName(key, value,
// writer), a NodeAllocation without pods. A bind is guarded on a key when
// the pod has such a rule on it, or when a rule listed in the guard
// registry (GuardRegistryName, a NodeAllocation with one annotation per
// rule — its key and which pods it counts — and per writer) selects the
// pod; a guarded bind rewrites its writer's record of its node's domain
// and compares every other writer's at the revision this replica knows,
// in the bind transaction. So two replicas that each count a zone's pods
// without the other's bind, and bind into it, conflict: the second one
// decides again. Binds into other zones only raise their counts, which
// cannot raise this pod's skew. Why it holds:
//
//  1. A pod with a zone-wide rule binds only once the registry lists the
//     rule, on a decision whose pod informer had reached the registry's
//     revision: it saw every pod bound before (those did not guard). The
//     bind of its first pod lists it (rewriting the pod unchanged in that
//     transaction, so the pod informer gets there) and decides again. A
//     writer is listed before its first guarded bind, likewise.
//  2. Every bind compares the registry, so a pod the rule selects, bound
//     after it was listed, guards (its bind knew the rule) or loses the
//     race (it did not, and reads the registry again); and every guarded
//     bind knows every writer.
//  3. The compare of another writer's record says nothing the decision
//     did not see only if its revision is one the pod informer had
//     reached before the decision; else the record is read, the pod
//     informer awaited, and the pod decided again. A replica's own
//     guarded binds compare nothing of each other's: its cache holds them
//     (assumed), as kube-scheduler's does, and they commit in parallel.
//
// A pod the rules never select pays one compare of the registry (absent:
// revision 0) and a scan of its entries; a guarded bind one write and a
// compare per other writer, whatever the domain's size. A restarted
// replica is a new writer (a random suffix), so that a bind of its
// predecessor still in flight is compared too; the registry only grows
// (a writer's record, once dead, is compared at a revision that no longer
// changes). The registry's rules are wider than the pods' (matchLabelKeys
// dropped, a namespaceSelector read as every namespace): it may guard a
// bind that needs none, never miss one. TestTopologyReplicas ("spread by
// zone", "anti-affinity by zone") shows the rules held across three
// replicas, and broken without the record's compare;
// TestBindComparesGuardRegistry drives point 2 (a bind knowing the
// registry before another replica listed a rule that selects its pod
// loses on the registry, and without that compare the rule's pod binds
// at skew 2). Required pod
// affinity needs no guard — a bind only adds pods — but for its exemption
// (affinityanchor.go): the first pod of a self-affine group goes anywhere
// when no pod matches its terms in the whole cluster, which two replicas
// can each believe at once. A decision that relied on it
// (Result.FirstOfGroup) binds comparing and rewriting one anchor record
// per required affinity term (a NodeAllocation without pods, named
// "~affinity-first:" and a hash of which pods the term selects, widened
// as the registry's rules and without the topology key), at the revision
// this replica knows (absent: still absent; known at a revision newer
// than the decision: stale). A second replica's such bind loses on the
// anchor, reads it, waits for its pod informer (the first pod was bound
// at the anchor's revision) and decides again, joining the first pod's
// domain (TestFirstOfGroupAnchor, by zone and by hostname). The same
// decision's bind first lists each of its terms in the registry as a rule
// over one cluster-wide pseudo domain (ClusterKey "~cluster", value
// ClusterValue "all", on every node; firstPodRules) and decides again
// (point 1), so every bind of a pod such a term selects, plain ones
// included, is guarded on it: it rewrites its writer's cluster record
// (compared by nobody but first-pod binds: only their premise, "no pod
// matches", a bind anywhere can break), and the first pod's bind compares
// every other writer's (point 3). A plain pod the term selects, bound by
// another replica while the first pod binds elsewhere, makes that bind
// lose; it then joins the plain pod's domain (TestFirstPodGuardsCluster:
// red without the listing and without the compare); a plain pod that
// decided before the term was listed loses on the registry (point 2). Two
// first pods now meet on both the anchor and the cluster records: either
// alone holds them (TestFirstOfGroupAnchor is red only without both); the
// anchor is kept. Binds no listed first-pod term selects pay nothing
// more. Not guarded: node label changes and new nodes (a new domain
// lowers the least count), as before.
//
// Preemption (preempt.go). When a cycle nominates the pod, one store
// transaction compares the preemptor's revision (still the unbound pod
// the decision saw), every victim's (still bound to the node, not
// terminating) and the node's NodeAllocation's, and puts the record with
// a reservation for the preemptor (ReservationPrefix + its uid: its
// requests and priority; released on the node it was nominated to
// before), the preemptor with status.nominatedNodeName and
// PodScheduled=False, each victim marked terminating as `kubectl delete
// pod` marks it (stage.MarkTerminating) with DisruptionTarget=True reason
// PreemptionByScheduler, and each victim's Preempted Event ("Preempted by
// pod <uid> on node <node>"); then PodDeleteRequested goes to the node
// (stage.RequestDeletion, the api stage's graceful deletion path). Why it
// is safe across replicas and crashes:
//
//   - Nominating and deleting are one commit: no victim is marked without
//     its preemptor nominated to its node, and a preemptor's revision
//     changes with its nomination, so a second replica's preemption of it
//     fails its compare (no double nomination).
//   - A decision on a cache behind the store is caught and retried after
//     the cache has caught up: a victim found terminating that the cache
//     thought alive (another preemption took it, and nominated its
//     preemptor at that revision) ends the attempt and waits for the pod
//     informer to reach that revision; a pod already nominated is decided
//     on a cache at least at its own revision, which holds its victims'
//     marks, so it waits for them instead of preempting again
//     (kube-scheduler's "not eligible due to a terminating pod on the
//     nominated node.").
//   - The room is the nominee's in the store, not only in the caches: every
//     bind to the node compares its record, and CheckAllocationFit counts
//     the reservations of nominees of equal or higher priority
//     (kube-scheduler's rule for nominated pods), so a replica whose pod
//     watch has not yet seen the nomination cannot bind a pod of no higher
//     priority into it (it loses the race, and retries on a cache that has
//     the nomination); a pod of higher priority may take it, as in
//     kube-scheduler. A preemption re-checks the record too: its victims
//     must make room beside the reservations there, else the decision was
//     on a stale cache and is taken again after it caught up. Every
//     replica also learns nominations from its pod informer and counts a
//     nominated pod's requests on its node for pods of no higher priority
//     when it decides; when a bound pod leaves a node, every replica
//     queues the pods nominated to it, due at once (the bind arbitrates).
//     The bind clears nominatedNodeName and releases the reservation. A
//     nominee deleted unbound leaves its reservation: the replicas whose
//     pod informer sees the deletion, and Reconcile, release it once a
//     fresh read of the pod says it is no longer nominated there
//     (Counters.ReservationsReleased).
//   - A replica killed after the commit leaves terminating victims and a
//     nominated preemptor: the preemptor's event comes back to another
//     replica after AckWait (or Reconcile finds it after OrphanAge), which,
//     finding its victims still terminating, asks their node again to
//     delete them (requestPreemptedDeletions; the node agent's
//     reconciliation stops terminating pods anyway), and binds it once they
//     are gone.
//
// A cycle that nominates holds the nomination in its replica's cache
// (Cache.Nominate, under the cycle lock) until the preemption commits or
// fails, as a bind's AssumePod holds the node: the cycles that run while
// the transaction is in flight see the room taken and pick other nodes
// and victims, instead of all choosing the same ones and losing the race
// to the first.
//
// Scheduling gates. A pod with spec.schedulingGates is not scheduled: it
// gets PodScheduled=False with reason SchedulingGated ("Scheduling is
// blocked due to non-empty scheduling gates") and waits outside the retry
// queue; when the pod informer sees an update remove its last gate, the
// pod is queued, due at once (on every replica: the bind arbitrates).
//
// Unschedulable pods. A pod no node fits (checked again from a fresh read
// before it is reported) gets PodScheduled=False with reason
// Unschedulable and kube-scheduler's message, a FailedScheduling Event in
// the same words, and a PodUnschedulable event carrying up to 100 nodes'
// verdicts for describe and trace. The replica then retries it with
// backoff (InitialBackoff doubling to MaxBackoff), and at once when a node
// is added, a node's spec, labels, allocatable or readiness change (not a
// mere heartbeat), a bound pod is deleted or terminates, or a PodDeleted
// arrives. A change that comes while the pod's own attempt is running is
// not lost: the attempt compares the wake count it read before deciding,
// and a pod found busy is made due. Due pods are retried in
// kube-scheduler's PrioritySort order: higher spec.priority (resolved by
// admission from priorityClassName) first, then the longest waiting; new
// pods arrive in the consumer's order. Reconcile (at start and every resync) schedules unbound pods
// nobody has tried for OrphanAge: lost events, pods queued on a replica
// that died. Running a replica:
//
//	st, err := scheduler.NewStage(env, scheduler.DefaultStageConfig())
//	if err != nil { ... }
//	rc, _ := pipeline.RunnerConfig(pipeline.Scheduler, env.Replica)
//	err = stage.Run(ctx, conn, env, st, stage.Config{Runner: rc, ResyncPeriod: 10 * time.Second})
//
// Callers' obligations (the Scheduler and the cache, without the Stage):
//
//  1. Feed the Cache every node and bound-pod event (AddNode, UpdateNode,
//     RemoveNode; AddPod, UpdatePod, RemovePod), namespace
//     (SetNamespace, RemoveNamespace) and PodDisruptionBudget (SetPDB,
//     RemovePDB). Objects passed in are retained and must not be
//     modified afterwards.
//  2. After choosing a node, AssumePod the pod onto it before the next
//     cycle, so the next pods see its resources as taken; when the bind
//     transaction fails, ForgetPod it. The bound-pod event confirms it.
//  3. Bring the cycle's Snapshot up to date with Cache.UpdateSnapshot
//     before each cycle, from the goroutine that owns the Snapshot, and do
//     not update a Snapshot while it is being read.
//  4. Use a Scheduler from one goroutine.
//  5. In the bind transaction, re-check the pod against the node's stored
//     NodeAllocation with CheckAllocationFit and write MergeAllocation's
//     record, comparing the revision read, so that replicas never
//     overcommit a node.
//
// Example:
//
//	c := cache.NewCache()
//	_ = c.AddNode(node) // for each node event; AddPod for bound pods
//	sched, err := scheduler.New(scheduler.DefaultConfig())
//	if err != nil { ... }
//	snap := framework.NewSnapshot()
//	for pod := range pending {
//		c.UpdateSnapshot(snap)
//		res, err := sched.Schedule(pod, snap)
//		if errors.Is(err, framework.ErrUnschedulable) {
//			// record err.Error() as the FailedScheduling event
//			continue
//		}
//		_ = c.AssumePod(pod, res.Node)
//		// bind with a store transaction; on failure c.ForgetPod(pod)
//	}
package scheduler

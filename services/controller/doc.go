// Package controller is the framework of podflow's workload controllers
// (ReplicaSet, ReplicationController, Deployment, Job, CronJob,
// StatefulSet, DaemonSet and the disruption controller): controller stages that
// consume no events (stage.Config.NoConsumer), watch the store through
// informers, and act by writing the store and by creating pods through
// the pipeline. It gives each one what kube-controller-manager's
// controllers get from client-go, and what podflow adds: several replicas
// sharing the work without a leader, and a replica killed at any moment
// never making a controller overshoot.
//
// # The parts
//
//   - Runner: a work queue of the controller's keys ("namespace/name")
//     with rate-limited retries and Config.Queue.Workers syncing distinct
//     keys at once (services/workqueue), fed by the controller's informer
//     handlers and by Reconcile (at start and every resync period, so a
//     missed change heals).
//   - Members: sharding. Every replica holds a coordination.k8s.io Lease
//     in kube-system ("podflow-<stage>-<replica>", labelled
//     LabelController), renewed every RenewInterval. A key belongs to the
//     live replica with the highest rendezvous hash of (replica, key)
//     (Owner): no leader, no bottleneck, and a replica joining or leaving
//     moves only its share of the keys.
//   - Expect and Satisfied: kube's "expectations", made exact. A write a
//     sync makes (a pod created, marked deleted, adopted) returns its
//     store revision; the key is not synced again until the informers
//     reached it. No counting, no timeout: a revision.
//   - SetPending and Pending: a pod creation that got no answer
//     (ErrUncertain) keeps its name pending; the next sync counts it as
//     on its way and asks for that very name again, never a new one.
//   - Pods: creation through the pipeline (the api stage's controller
//     intake, pipeline.ControllerPodsSubject; PodRequested, admission,
//     persistence, the same trace and limits as a user's pod) and
//     graceful deletion (stage.DeletePod). PodName and FreeNames name a
//     pod by its slot: every replica derives the same name for a slot.
//   - NewPodInformer and NewPodSpecInformer: a controller's pod informer
//     that decodes only what the controller reads — another kind of
//     controller's pods as metadata alone, or each pod with its spec cut
//     to the fields named — since every controller stage receives every
//     pod write.
//   - LazyPods: a controller's pod informer run only while it needs pods
//     (typically while its own kind has objects, and Config.PodsIdle
//     after the last is gone), every sync waiting for its list
//     (informer.Lazy): a controller with nothing to do holds no watch
//     of every pod.
//   - SlowStart, KubePod, ClaimOf, AdoptPod, ReleasePod, Events: kube's
//     slow start, the pod fields its ranking and availability helpers read
//     (k8s.io/kubernetes/pkg/controller), ownerReference adoption and
//     release, and an event recorder with kube's spam filter.
//
// # A key's life on one replica
//
//	       Add (informer, Reconcile, membership change)
//	             │
//	             ▼
//	┌──────── queued ◀──────────── AddAfter (retry, Settle, minReadySeconds)
//	│            │ a worker takes it (never two at once)
//	│            ▼
//	│   not owned ──────────▶ dropped (its owner syncs it)
//	│   owned, settling ────▶ AddAfter(the rest of Settle)
//	│   owned ──▶ sync:
//	│     expectations not met ──▶ status only; synced again on the
//	│                              informer event that meets them
//	│     met ──▶ pending names asked again, then create / delete /
//	│             adopt / release, each write Expect-ed; status
//	│            │
//	└── error ◀──┘ (retried with backoff)
//
// # Why a replica killed mid-sync never makes a ReplicaSet overshoot
//
//  1. One replica at a time syncs a key. A key moves when a replica's
//     Lease expires (LeaseDuration after its last renewal, as seen by the
//     others), is released (a clean stop, after its last sync), or a
//     replica joins; in the last case the new owner waits Settle, time
//     for the previous owner to see the change, and a long sync checks
//     Runner.Owns between its steps (SlowStart's proceed). A replica
//     that cannot renew its Lease for RenewDeadline (shorter than
//     LeaseDuration) owns nothing: it stops before the others start. The
//     keys it refused meanwhile are queued again once it renewed.
//  2. A pod's name is its idempotency key. Names are derived from the
//     controller object's uid and a slot (PodName); the lowest free slots
//     are taken. Persistence creates a pod only if its name is free, so
//     a creation asked twice — retried after a timeout, or by the next
//     owner after a kill — makes one pod; the second ask is answered
//     ErrNameTaken.
//  3. A sync decides from informers that reflect every write it made
//     (Expect), so it never creates again what it created a moment ago.
//  4. The one window left is a creation accepted by a replica that then
//     dies, still in the pipeline when the next owner, LeaseDuration
//     later, decides without it: the new owner derives the same names for
//     the same free slots, so it asks for the same pods. It would make
//     one more only if, meanwhile, another slot freed up and the
//     pipeline held the creation longer than LeaseDuration.
//
// # The caller's obligations (a controller stage)
//
//  1. Create a Runner with New(store, cfg, sync, keys) and pass its
//     Start the informer.Group of its informers (the Runner adds its
//     Lease informer); implement stage.Reconciler with Runner.Reconcile.
//  2. Add the key of every object an informer event concerns (the
//     object, the owner of a pod that changed, ...).
//  3. Make sync idempotent and decide only from informers: skip creating
//     and deleting while !Satisfied(key, rev) (the lowest revision among
//     the informers it reads), Expect the revision of every write, keep
//     uncertain creations pending.
//  4. Create pods with Pods.Create with names from PodName or FreeNames
//     (or names of its own that are stable per slot, as a StatefulSet's
//     ordinals), never generateName.
//  5. Check Runner.Owns between batches of a long sync.
//  6. Run with its stage's identity (pipeline: Outputs, storeWrites, a
//     ServiceAccount in ControllerAccount and a bootstrap ClusterRole in
//     auth.BootstrapPolicy).
//
// Usage (the ReplicaSet controller, services/stages/replicaset):
//
//	r, err := controller.New(env.Store, cfg, c.sync, c.keys)
//	pods := controller.NewPods(env, controller.NATSRequester(env.NATS))
//	// Start:
//	infs.Add(sets, podInformer)
//	err = r.Start(ctx, g, &infs)
//	// sync:
//	if r.Satisfied(key, podInformer.Revision()) { ... pods.Create(...); r.Expect(key, rev) }
package controller

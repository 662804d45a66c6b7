// Package bus is podflow's messaging layer over NATS JetStream: an
// embedded server, connections, the subject scheme, declarative stream
// and consumer provisioning, deduplicated typed publishing and the stage
// runner every service is built on.
//
// # Subjects
//
// Every event is an eventsv1.Envelope marshalled with protobuf. Its
// subject is chosen by Subject(env) from its type:
//
//	podflow.pod.<Type>.<node>.<namespace>.<name>   pod lifecycle events         PODFLOW_EVENTS
//	podflow.node.<node>.<Type>                     node-level (NodeHeartbeat)   PODFLOW_NODES
//	podflow.dlq.<stage>                            DeadLetter records           PODFLOW_DLQ
//	$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>   server advisories            PODFLOW_ADVISORIES
//	podflow.api.>                                  reserved: api request-reply, never in a stream
//	podflow.store.>                                reserved: store request-reply, never in a stream
//
// <node> is env.NodeName, the node the event is addressed to or comes
// from (PodScheduled carries the chosen node; a node agent's reports its
// own; PodDeleteRequested of a bound pod the pod's node), or "~" while
// the pod has none. Every pod event has the same shape, so one wildcard
// selects by type, by node or by pod:
//
//	TypeFilter("PodScheduled")              podflow.pod.PodScheduled.>
//	NodeFilter("n1")                        podflow.pod.*.n1.>
//	TypeNodeFilter("PodScheduled", "n1")    podflow.pod.PodScheduled.n1.>   (a node agent's consumer)
//	PodFilter("default", "web")             podflow.pod.*.*.default.web
//
// Names become tokens with EncodeToken, deterministically and
// reversibly: letters, digits and '-' are kept, '.' becomes '_' (which
// Kubernetes names never contain), any other byte becomes "~XX" (hex),
// and the empty string is "~". ParseSubject inverts Subject exactly.
// Heartbeats live in their own stream so that PODFLOW_EVENTS is not
// flooded: it keeps the last NodeHistory messages per node and type.
//
// A node's PodStatusReport carries the steps that followed it and that no
// stage consumes (eventsv1.Steps: PodSandboxReady … PodRunning, PodReady,
// PodNotReady) inside
// itself rather than as messages of their own; DecodeEvents gives a reader
// of the stream the events one message stands for (eventsv1.Unfold), so
// the timeline readers see every step with its own id and time.
//
// # Publishing and deduplication
//
// Conn.Publish fills env.Id with eventsv1.EventID(env) — pod uid (or
// request id), type, generation and attempt — and sends it as the
// Nats-Msg-Id, so a retried publish within the stream's Duplicates window
// (2 minutes by default) is stored once and its PubAck says Duplicate.
// The Nats-Msg-Id is the message's only header: its type is in its
// subject, its trace context (traceparent) in the envelope. A publish
// that no stream acknowledges fails with an error matching
// ErrStreamUnavailable; retrying it is safe.
//
// # Stages
//
// A stage is a Handler run by a Runner over a durable pull consumer that
// all its replicas share, so adding a replica splits the work. The
// runner acks after the handler returns nil, naks with RunnerConfig's
// Backoff after an error, and on a Permanent error, an undecodable
// message, or a failure on the last of MaxDeliver deliveries, records a
// DeadLetter envelope (with an error code: Permanent, Decode,
// MaxDeliver) on podflow.dlq.<stage> and terminates the message. A
// message whose handler never returned (the replica died or hung past
// AckWait on the last delivery) is reported by the server's
// max-deliveries advisory; PODFLOW_ADVISORIES keeps it until a replica
// of the stage, through its durable "<consumer>-maxdeliver" consumer,
// records it the same way (code MaxDeliver) — even if no replica was
// alive when it was published. Dead letters have deterministic ids
// (dlq/<stream>/<consumer>/<seq>), so both paths record a message once.
//
// Caller's obligations:
//
//  1. Provision the topology at start-up (Provision with DefaultStreams
//     and each stage's RunnerConfig.ConsumerSpecs()). Nothing else in
//     this package creates streams or consumers, and a runner refuses a
//     consumer whose MaxDeliver differs from its own. (Without the
//     advisory consumer a runner falls back to a core subscription, and
//     advisories published while no replica is up are lost.)
//  2. Make handlers idempotent and make their effects durable before
//     returning nil: a message can be delivered again after a crash, a
//     lost ack or a redelivery, and handling it twice must leave the
//     same state.
//  3. Publish follow-up events with d.Next(payload), so ids stay
//     deterministic (a redelivered handler republishes the same ids,
//     which JetStream drops as duplicates) and the timeline fields
//     (stage, replica, caused_by, handled_start/end, redeliveries) are
//     filled. Two distinct events of one type about one pod must differ
//     in generation or attempt, or carry an explicit Id.
//  4. Return Permanent(err) for errors that no retry can fix.
//  5. Cancel Run's context to stop; Run drains before it returns. Close
//     the Conn after every Runner using it has returned.
//  6. Keep Observers non-blocking.
//
// # Limits
//
// PODFLOW_EVENTS refuses new messages when it reaches EventsMaxBytes
// (DiscardNew): Publish returns ErrStreamFull and StreamFullRefusals
// counts it, so events no consumer processed are never evicted to make
// room; messages older than EventsMaxAge are still removed. Messages on
// PODFLOW_EVENTS and PODFLOW_NODES are at most EventsMaxMsgSize, whoever
// publishes them (the client role included): ErrMessageTooLarge.
// PODFLOW_DLQ and PODFLOW_ADVISORIES keep at most DLQMaxBytes for
// DLQMaxAge, evicting the oldest. (nats-server has per-user payload
// limits only for JWT users, not for the password users of the embedded
// configuration, so the size bound is the streams'.)
//
// # Durability
//
// A PubAck means the stream leader has written the message to its file
// store. The embedded server keeps nats-server's default: writes reach
// the OS page cache before the PubAck and files are fsynced every
// SyncInterval (2 minutes). That survives the failure podflow is built
// to tolerate — any process, including the server's, killed with
// SIGKILL — but a power loss or kernel crash can lose the last
// interval's acknowledged messages. EmbeddedConfig.SyncAlways fsyncs
// before every PubAck instead. BenchmarkPublish and
// BenchmarkStageLatency measure the cost; on the 2-core development VM
// (shared, load average 6–10) a synchronous publish took 150–250µs by
// default and 1.3ms with SyncAlways (4,000–6,700 vs 750 events/s), and
// the publish → handle → confirmed-ack trip 0.31–0.34ms vs 0.95–1.0ms
// at p50. A five- to tenfold cost on
// every event buys protection only against machine failure, which a
// single embedded server cannot survive anyway (the server itself is
// on that machine), so the default stays. In a cluster (Replicas 3) a
// PubAck means a quorum has the message, which covers the loss of one
// machine without an fsync on every write.
//
// # Identities
//
// The embedded server authenticates every client. Its credentials file
// holds the admin user (everything: the only identity that manages
// streams and consumers), the users of EmbeddedConfig.Roles, and one user
// per person or program of podflow (AddUser: user-<API user>, which may
// ask the api front door and read its own inbox), each restricted by NATS
// subject permissions; a running server takes added and removed users
// from the file (WatchCredentials). The package knows how NATS and
// JetStream name things (ConsumeSubjects, ReadStreamSubjects,
// RunnerConfig.PublishSubjects); the policy — which role may do what — is
// services/pipeline's. A connection that authenticates as a user gets the
// inbox prefix InboxPrefix(user), so that a user may be allowed to read
// its own replies and no one else's.
//
// Off loopback, passwords travel over TLS only: EmbeddedConfig.TLS serves
// clients with TLSVerify (a client presents a certificate of the bus's CA
// before it may try a password), EmbeddedConfig.ClusterTLS runs routes
// over mutual TLS, and Validate refuses a non-loopback Host without them.
// Clients dial with Config.TLS or Config.TLSFiles (the "tls" object of a
// client configuration file).
//
// # Example
//
//	srv, err := bus.StartEmbedded(ctx, bus.DefaultEmbeddedConfig(dataDir))
//	if err != nil { ... }
//	defer srv.Shutdown()
//	conn, err := bus.Connect(ctx, srv.ClientConfig("scheduler-1"))
//	if err != nil { ... }
//	defer conn.Close()
//
//	rc := bus.DefaultRunnerConfig("scheduler")
//	rc.FilterSubjects = []string{bus.TypeFilter("PodPersisted")}
//	topo := bus.Topology{
//		Streams:   bus.DefaultStreams(bus.DefaultStreamsConfig()),
//		Consumers: rc.ConsumerSpecs(),
//	}
//	if err := bus.Provision(ctx, conn.JetStream(), topo); err != nil { ... }
//
//	r, err := bus.NewRunner(conn, rc, func(ctx context.Context, d *bus.Delivery) error {
//		node, err := schedule(ctx, d.Envelope) // store transaction
//		if err != nil {
//			return err // retried with backoff, dead-lettered after MaxDeliver
//		}
//		next := d.Next(&eventsv1.PodScheduled{NodeName: node})
//		next.NodeName = node
//		_, err = conn.Publish(ctx, next)
//		return err
//	})
//	if err != nil { ... }
//	return r.Run(ctx) // until ctx is cancelled, then drains
package bus

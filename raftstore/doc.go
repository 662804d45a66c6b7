// Package raftstore is podflow's state of record, its etcd: a replicated,
// versioned key-value store built on hashicorp/raft and served over NATS
// request-reply with protobuf messages (proto/storev1). Values are opaque
// bytes (serialized podflow objects) under keys laid out like Kubernetes'
// etcd registry, /registry/pods/<namespace>/<name>.
//
// # Data model
//
// One global revision is bumped by every write that changes something; a
// key's ModRevision is the revision of its last write (the object's
// resourceVersion) and CreateRevision that of the write that created it.
// Writes are Create, Update and Delete with an expected revision, and Txn:
// compares on keys' revisions and then puts and deletes applied atomically at
// one revision. Watch streams every change under a prefix after a revision,
// in order, without gaps or duplicates. The change history is kept for the
// last Config.HistoryRevisions revisions; a watch from before that fails
// with ErrGone, and the caller relists.
//
// # Serving
//
// Every replica subscribes, in one queue group, to <prefix>.stale (stale
// reads) and <prefix>.watch (watch starts), and without a queue to
// <prefix>.status (scatter-gather status). Only the leader subscribes to
// <prefix>.write, <prefix>.read (linearizable reads) and <prefix>.admin
// (membership), and only after a Barrier in its term, so its state holds
// every write committed before it won; it unsubscribes when it loses
// leadership. Followers therefore never see writes and forward nothing: a
// client finds the leader through NATS, and during an election gets "no
// responders" or NotLeader and retries with backoff. The leader decodes a
// write once: its state machine applies the command the write's handler
// decoded when raft hands it the same log slice (handed.go); followers
// decode what they receive.
//
// Reads are linearizable by default: the leader confirms it still leads
// with VerifyLeader after the read arrived (concurrent reads share one
// VerifyLeader round, started after they joined it) and serves the read
// from its applied state, checking that its term did not change. Stale()
// reads are served by any replica from its local state, which may be behind
// but never ahead of the committed log; with MinRevision(rev) only once the
// replica has applied rev (it waits at most an election timeout, else
// answers ErrUnavailable and the client retries another replica), so a
// reader that knows a revision reads cheaply without going back before it.
//
// Writes are raft log entries (storev1.Command). Each carries a
// client-generated idempotency key, reused on every retry of that write; the
// state machine remembers the results of the last Config.DedupEntries keys,
// so a retried write is applied at most once and the retry gets the original
// result. A write whose outcome is unknown (leadership lost after the entry
// was appended, or the deadline passed after the request was sent) is
// retried until the caller's deadline and then reported as ErrIndeterminate.
//
// Named requesters: a client with ClientConfig.User sends its reads,
// watches and writes to <prefix>.<op>.<user> (the replicas subscribe to
// <prefix>.<op>.* too). When Config.ReadACL or Config.WriteACL is set, a
// read, list or watch the user may not make, or a write with any op on a
// key the user may not write, is refused with CODE_FORBIDDEN (nothing
// applied). Config.WriteFilter confines a named writer within a key it
// may write: its check sees the stored and the written value, refuses
// what the writer may not change (CODE_FORBIDDEN), and pins what it
// allowed to the revision it checked (a racing change makes the write
// CODE_CONFLICT). The bus's subject permissions are what make the name
// trustworthy: each user may publish to its own subjects only.
//
// Lists are chunked: a list's answer is streamed to the reader's inbox in
// chunks of at most half the bus's max payload (2 MiB at most), every
// chunk cut from one list taken under the state machine's read lock (the
// key space at one revision), with at most four chunks sent ahead of the
// reader's acknowledgements; Client.List assembles them, and a chunk lost
// or late makes it list again. No object count or size breaks a list.
//
// Acknowledgements (list windows, watch heartbeats) go to a subject of the
// store's, <prefix>.ack.<replica token>.<stream id>-<n>.<requester>, never
// to a replica's inbox, so they need no dynamic reply permission of the
// bus (which a NATS server drops at every reload of its users); the bus
// lets each user publish only its own name's, and a replica counts one
// only on the exact subject it chose (acks.go).
//
// Watches: a watch start goes to any replica (queue group), which streams
// numbered messages to the client's inbox and sends a heartbeat request when
// idle; the client answers heartbeats, and the replica drops a watch whose
// client stops answering. The client resumes on another replica from the last
// revision it delivered when a message is missing, the replica says it is
// shutting down, or nothing arrived for ClientConfig.WatchHeartbeatTimeout.
// A replica that is alive but cut off from the raft cluster keeps a watch
// alive without new events until it rejoins; watches never go back in time.
//
// # Limits
//
// As etcd's, each refusal coded and naming its limit, nothing applied:
//
//   - A write request (its encoded command) is at most
//     Config.MaxRequestBytes, 1.5 MiB (etcd's --max-request-bytes):
//     ErrTooLarge (CODE_TOO_LARGE). A request larger than the bus's max
//     payload fails at the client with ErrTooLarge at once, not retried.
//   - The keys, values and watch history together are at most
//     Config.QuotaBackendBytes, 2 GiB (etcd's --quota-backend-bytes): the
//     leader refuses a write that puts anything past it with ErrNoSpace
//     (CODE_NO_SPACE, "database space exceeded") and raises the NOSPACE
//     alarm (Status.Alarms, the raftstore.alarm.nospace go-metrics gauge,
//     an error log). Reads and writes made only of deletes still work; the
//     alarm clears at the first write that fits again. The check is the
//     leader's, before proposing, so concurrent writes may pass it together.
//   - The watch history keeps Config.HistoryRevisions revisions and at
//     most about Config.HistoryBytes (128 MiB) of keys and values; a watch
//     from a dropped revision gets ErrGone.
//   - Keys are at most 4096 bytes (ErrInvalid).
//
// # Durability
//
// The raft log and stable store are hashicorp/raft-wal in DataDir/wal: an
// append-only segmented log written for hashicorp/raft, with one fsync per
// append batch (bbolt fsynced twice per commit), so hashicorp/raft's batching
// (BatchApplyCh, MaxAppendEntries) costs one disk flush per batch. Segments
// are preallocated (Config.LogSegmentBytes, 64 MiB) and the torn tail a crash
// leaves is cut off on open; term and vote live in its small bbolt meta
// database, written at elections only. Config.NoSync turns the fsync off for
// throwaway test clusters. A replica holds an exclusive flock on
// DataDir/LOCK while it runs; a second one on the same directory fails with
// ErrDataDirLocked (the kernel drops the lock of a killed process).
//
// Migration: a data directory of the bolt era (DataDir/raft.db) is copied
// into the WAL on Start (log entries and raft's term and vote, through
// raft-wal's migrate package) in DataDir/wal.migrating, renamed to wal when
// complete, and raft.db is then renamed raft.db.migrated (delete it once
// the replica runs). A crash during the copy leaves raft.db in place and the
// copy is redone; an error names the file and says to rejoin the replica
// with an empty data directory instead. raft-boltdb/v2 stays a dependency
// for that read only; it imports go-metrics/compat, which go-metrics v0.7.0
// (required by raft v1.8.0) removed, so go.mod replaces go-metrics with
// v0.6.1, which has both.
//
// Snapshots go to a FileSnapshotStore in the data directory and hold the
// key space, the watch history and the idempotency window, so a restored
// replica answers watches and retries like the others.
//
// # Counters
//
// Each replica's Status carries Counters since it started: the write, read,
// stale read and watch requests it served, the watch events it sent, and
// its raft-wal appends (fsyncs) and entries written. `podflow bench
// pipeline` turns them into store requests, raft log entries and fsyncs
// per pod.
//
// Client.StatusWithHash adds each replica's ContentHash: an FNV-1a hash of
// every key, value and revision it holds, read under one lock with the
// revision it was read at (ContentHashRevision). Replicas at one revision
// with equal hashes hold the same key space; it scans every key, so it is
// for checks (`podflow chaos`), not for polling. Plain Status computes none.
//
// # Transport security
//
// Raft RPCs (AppendEntries, RequestVote, InstallSnapshot) rewrite the store
// past every ACL, so whoever reaches the raft port must be a replica, on
// loopback too (any local user can open a loopback port). The transport is
// always a mutual-TLS raft.StreamLayer (Config.TLS is required; MutualTLS
// builds it): both sides present a certificate of the cluster's CA whose
// subject carries PeerGroup (checked by the store whatever else the given
// configuration checks), and a dialer without one fails at the handshake
// before raft reads a byte. Tests and production take the same path.
//
// # Data at rest
//
// A replica makes its data directory owner-only at start (directories
// 0700, files 0600; each path repaired is logged once) and refuses one
// holding another uid's files (ErrDataDirOwner); log segments and
// snapshots are created owner-only. With Config.Encryption
// (LoadEncryptionConfig: kube-apiserver's EncryptionConfiguration,
// secretbox, aesgcm or identity providers) the leader encrypts the values
// of the configured prefixes (/registry/secrets/) before proposing the
// write, so the raft log and snapshots hold ciphertext with
// kube-apiserver's "k8s:enc:<provider>:v1:<key>:" prefix; reads, lists,
// watch events and Config.ReadFilter see plaintext. After a key rotation,
// Client.RewriteEncrypted reseals the values sealed with an older key.
//
// # Caller obligations
//
//  1. Run an odd number of replicas (3 by default), each with a stable ID and
//     its own DataDir; bootstrap the first members with the same
//     Config.Bootstrap list, add later ones with Config.Join (or
//     Client.AddVoter) and remove them with Client.RemoveServer.
//  2. Own the NATS connection given in Config.Conn and NewClient; close it
//     after Node.Shutdown and after stopping every Watch.
//  3. Pass a context to every client call; without a deadline the client
//     applies ClientConfig.Timeout.
//  4. Treat ErrIndeterminate as "may have happened": re-read before acting.
//  5. On ErrGone from a watch, relist and watch from the list's revision.
//  6. Stop every Watch (or cancel its context).
//
// # Example
//
//	node, err := raftstore.NewNode(cfg) // cfg from raftstore.DefaultConfig()
//	if err != nil { ... }
//	if err := node.Start(ctx); err != nil { ... }
//	defer node.Shutdown()
//
//	c, err := raftstore.NewClient(nc, raftstore.DefaultClientConfig())
//	rev, err := c.Create(ctx, "/registry/pods/default/web", podBytes)
//	kv, err := c.Get(ctx, "/registry/pods/default/web")
//	_, err = c.Update(ctx, kv.Key, newBytes, kv.ModRevision)
//	if errors.Is(err, raftstore.ErrConflict) { /* re-read and retry */ }
//	kvs, listRev, err := c.List(ctx, "/registry/pods/", raftstore.Stale())
//	w, err := c.Watch(ctx, "/registry/pods/", listRev)
//	for ev := range w.Events() { ... }
//	if errors.Is(w.Err(), raftstore.ErrGone) { /* relist */ }
package raftstore

// Package console is podflow's live web console: the pipeline of stages
// with each one's backlog and replicas, the pods with the stuck ones first,
// one pod's journey as a waterfall, and the nodes, updated live over
// server-sent events.
//
// One goroutine (Hub.Run) owns the polling: at most once a second, and only
// while someone watches, it reads the sources — every stage's durable
// consumer and dead letters (what `podflow streams` shows), the replicas'
// Pongs, the events stream incrementally (where each pod is, as in
// ops/trace), the store's pods and nodes, and the stages' Prometheus
// handling-time histograms — builds one Snapshot and hands the same JSON
// to every viewer. A pod's waterfall (ops/trace) is rebuilt on demand and
// cached for a second per pod, so viewers add no load of their own.
//
// The timeline (/api/timeline, history.go) is the events stream's own
// history over a range, not what the polls saw: ReadHistory counts the
// messages an ordered consumer delivers from the range's start time per
// bucket, stage and event type, bounded by messages and time, and
// HistoryCache keeps the finished buckets so that a refresh reads only
// what is new. Its marks come from the journals of the data directory
// (DATA/processes.log from up's supervisor, DATA/faults.log from
// `podflow chaos`; ops/processes/plan.Journal).
//
// The server (Server) is read-only and serves loopback only. It accepts the
// bearer tokens of the Kubernetes API's static token file (DATA/tokens.csv,
// by default only the admin's): in an Authorization header, or typed once
// into the login form, which opens a server-side session (session.go)
// whose id, never the token, is the HttpOnly, SameSite=Strict cookie;
// logout revokes it, and it expires after SessionTTL. ServiceAccount tokens are refused: the console shows every
// namespace, which only the token file's users may read.
//
// The page is static HTML, CSS and JavaScript embedded with embed: no
// build step, nothing fetched from the network.
package console

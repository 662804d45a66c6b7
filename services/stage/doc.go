// Package stage runs one replica of a podflow lifecycle stage: a Handler
// over the stage's durable consumer (bus.Runner), plus the level-triggered
// half — a Reconcile at start and every ResyncPeriod — and whatever
// background work the stage starts (informers). A stage never calls
// another stage: it reads the store, writes the store, and publishes the
// next event.
//
// A stage sees the world through narrow roles in its Env: a Publisher
// (Publish the next event, Reply to a requester) and an objects.Store
// over a small KV interface. The runner keeps the concrete *bus.Conn: Run
// takes it for the consumer and the pings. So a stage's logic runs in a
// unit test on stagetest's recording Publisher and objectstest's
// in-memory store, and in production on NATS JetStream and raftstore:
//
//	// production (ops/processes/roles)
//	env := stage.NewEnv(conn, objects.New(storeClient), "persistence", replica, log)
//	err := stage.Run(ctx, conn, env, persistence.New(env), stage.Config{Runner: rc})
//
//	// unit test
//	env, pub, kv := stagetest.NewEnv("persistence")
//	err := persistence.New(env).Handle(ctx, stagetest.Deliver(env, e))
//	// pub.Events(), pub.Replies(), objects.Get(ctx, env.Store, ...)
//
// A stage implementation:
//  1. implements Handle; it must be idempotent (any event handled twice
//     leaves the same state) and return only once its side effects are
//     durable (store write acknowledged, next event published) — the
//     runner acks after it returns nil;
//  2. returns bus.Permanent(err) for an event that can never succeed (it
//     is dead-lettered), any other error to retry with backoff;
//  3. optionally implements Starter (background goroutines, run under the
//     errgroup it is given, stopped by ctx; informers started together
//     with an informer.Group) and Reconciler;
//  4. writes several objects at once with an objects.Txn (Store.Commit),
//     never with store keys and bytes;
//  5. uses Env.NATS only in Start, for request-reply subjects it serves
//     (the api stage); it is nil in unit tests.
package stage

// Package plan is a podflow system as data: the processes `podflow up`
// runs, in what order, with what arguments and environment, how each is
// known to be ready, and the restart policy they run under. `podflow up`
// builds a Plan from its flags and runs it through ops/processes/supervisor;
// `podflow scale` changes a stage's replicas through the same Plan
// (Plan.Scale); `podflow chaos` picks its victims from the Records up
// keeps of the plan's running processes (Victims, by Kind).
//
// A Plan has Steps in start order — NATS (one server, or three clustered
// over routes), the store replicas, the stage replicas, the OCI registry
// (Linux runtime only), the node agent — each a list of Processes with a
// readiness Check. StopOrder is the reverse dependency order a system
// stops in. Layout names every file of the data directory.
//
// The caller:
//  1. picks the addresses of the first start (store raft addresses, NATS
//     ports) and creates the bus credentials, then builds the plan with
//     New (Options.FreeAddr picks metrics and registry addresses; tests
//     pass a deterministic one),
//  2. starts each Step's processes (Process.Spec) and runs its checks
//     before the next step; CheckConsumer checks are run once every step
//     has started,
//  3. serves scale requests with Plan.Scale, which returns the processes
//     to start and the names to stop and keeps the plan up to date,
//  4. writes the supervisor's children with WriteRecords at each change.
//
// Building a plan starts no process and touches no file: it is
// unit-testable as data.
//
// Example:
//
//	p, err := plan.New(plan.Options{Exe: exe, DataDir: dir, NATSPort: 4222,
//		StoreAddrs: addrs, StoreUser: storeUser, Replicas: replicas, Runtime: plan.RuntimeSim, Nodes: 3})
//	for _, pr := range p.Step(plan.Store).Processes {
//		sup.Start(pr.Spec(exe))
//	}
package plan

// Package up is `podflow up`: a whole podflow system started on this
// machine as supervised child processes, one per process role, from a
// plan (ops/processes/plan).
//
// Run reads as the start order: take the data directory and its lock,
// pick (or read back) the addresses of the first start, create every
// role's bus credentials and the Kubernetes API's certificates, build the
// plan; start the supervisor, then NATS and the streams, the store
// replicas, the bootstrap objects and the client configuration, the
// stages, the node agents (with the registry on the Linux runtime), the
// web console; then serve `podflow scale` requests until ctx is done.
// Each step waits until its processes are ready before the next starts.
//
// Beside it: IssueCert (`podflow pki issue`), PushImages (`podflow images
// push`), RunExample (the example pod followed to Ready) and
// SystemUnderTest (a fresh `podflow up` as a child, for bench and chaos).
//
// The caller:
//  1. fills Options (the command's flags) and calls Run with a ctx
//     cancelled on SIGINT or SIGTERM: Run then stops every child and
//     returns;
//  2. runs Run from the podflow binary: the children are this executable
//     (os.Executable) with a role's subcommand.
//
// Example:
//
//	o := &up.Options{DataDir: ".podflow", NATSPort: 4222, StoreReplicas: 3, Runtime: plan.RuntimeSim, Nodes: 3,
//		NodeGrace: 40 * time.Second, ServiceCIDR: plan.DefaultServiceCIDR}
//	err := up.Run(ctx, o, os.Stdout)
package up

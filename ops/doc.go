// Package ops holds the podflow command (cmd/podflow) and the libraries it
// is a thin layer over: plan (the processes of a system as data: roles,
// start order, arguments, readiness, restart policy), supervisor (runs
// them as child processes), roles (each process role's entry function),
// client (the one client-session setup of every command), trace, nemesis
// (network faults between the store replicas and the linearizability
// history of `podflow chaos`), and the
// end-to-end tests (e2e). cmd/podflow has `up`, the process roles, the
// client commands, observation, scale, chaos and bench.
package ops

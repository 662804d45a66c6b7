// Package ops holds the podflow command (cmd/podflow) and the libraries it
// is a thin layer of flags over:
//
//   - processes: what composes podflow's processes — plan (the processes
//     of a system as data), supervisor (runs them as child processes),
//     roles (each process role's entry function), nodewire (a node agent
//     wired to the bus and the store) and up (`podflow up`);
//   - client: the client session and protocol, printers, get and describe;
//   - chaos: `podflow chaos` and its invariant checker;
//   - bench: `podflow bench`;
//   - trace, console, nemesis: a pod's timeline, the web console, network
//     faults and the linearizability history;
//   - e2e: the end-to-end tests against `podflow up`.
package ops

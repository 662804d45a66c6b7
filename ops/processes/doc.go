// Package processes groups what composes podflow's processes: plan (the
// processes of a system as data: roles, start order, arguments,
// readiness, restart policy), supervisor (runs them as child processes),
// roles (each process role's entry function: which handler, which parts
// beside it, which bus identity), nodewire (a node agent wired to the bus
// and the store) and up (`podflow up`: a whole system on this machine or
// joined to another).
package processes

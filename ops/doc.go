// Package ops holds the podflow command (cmd/podflow): `up`, the process
// roles, the client commands, observation, scale, chaos and bench.
package ops

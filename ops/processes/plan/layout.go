package plan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/podflow/podflow/bus"
)

// Layout is where a `podflow up` keeps its files under its data
// directory. Every path is absolute when Dir is.
type Layout struct{ Dir string }

// ClientConfig is the client configuration every command reads.
func (l Layout) ClientConfig() string { return filepath.Join(l.Dir, "config.json") }

// NATSClientConfig is the bus client file of the admin (URLs and
// credentials), written by `podflow nats` or, for a cluster, by up.
func (l Layout) NATSClientConfig() string { return filepath.Join(l.Dir, "nats", "client.json") }

// Credentials is the NATS credentials file every server shares.
func (l Layout) Credentials() string { return filepath.Join(l.Dir, "nats", "creds.json") }

// RoleConfig is the bus client file of role's NATS user: nats/roles/<role>.json
// for the processes up runs.
func (l Layout) RoleConfig(role string) string {
	return filepath.Join(l.Dir, "nats", "roles", role+".json")
}

// ReadRoleConfig reads role's bus client file; for a role that has none
// the error names the roles there are.
func (l Layout) ReadRoleConfig(role string) ([]byte, error) {
	b, err := os.ReadFile(l.RoleConfig(role))
	if errors.Is(err, os.ErrNotExist) {
		entries, _ := filepath.Glob(l.RoleConfig("*"))
		roles := make([]string, 0, len(entries))
		for _, e := range entries {
			roles = append(roles, strings.TrimSuffix(filepath.Base(e), ".json"))
		}
		return nil, fmt.Errorf("no role %q here; the roles are %v", role, roles)
	}
	return b, err
}

// Kubeconfig is the admin's kubeconfig, held by the first server of a
// cluster.
func (l Layout) Kubeconfig() string { return filepath.Join(l.Dir, "kubeconfig") }

// UserBusConfig is the bus client file of apiUser's own NATS user
// (`podflow config bus-user`): nats/users/user-<apiUser>.json.
func (l Layout) UserBusConfig(apiUser string) string {
	return filepath.Join(l.Dir, "nats", "users", bus.UserRole(apiUser)+".json")
}

// UserClientConfig is the client configuration of apiUser: its bus file
// and the api stage's public key, no token (the user brings its own).
func (l Layout) UserClientConfig(apiUser string) string {
	return filepath.Join(l.Dir, "nats", "users", bus.UserRole(apiUser)+".config.json")
}

// LegacyUserConfig is the shared client identity's file of older
// versions; up removes it.
func (l Layout) LegacyUserConfig() string { return filepath.Join(l.Dir, "nats", "user.json") }

// SealKey is the api stage's key pair for sealed bearer tokens (its
// public half is in every client configuration).
func (l Layout) SealKey() string { return filepath.Join(l.Dir, "api-seal.key") }

// ProcessConfig is the client configuration of a process up runs as
// role: its own bus credentials, no bearer token.
func (l Layout) ProcessConfig(role string) string {
	return filepath.Join(l.Dir, "config", role+".json")
}

// Tokens is the api stage's static token file (the admin's token).
func (l Layout) Tokens() string { return filepath.Join(l.Dir, "tokens.csv") }

// Logs is the supervisor's log directory: one <name>.log per process.
func (l Layout) Logs() string { return filepath.Join(l.Dir, "logs") }

// Log is the log file of the process named name.
func (l Layout) Log(name string) string { return filepath.Join(l.Logs(), name+".log") }

// Children is children.json, the processes running now (see Record).
func (l Layout) Children() string { return filepath.Join(l.Dir, "children.json") }

// Processes is processes.log, the supervisor's journal: every start,
// exit (a kill) and restart of a process at the time it happened.
func (l Layout) Processes() string { return filepath.Join(l.Dir, "processes.log") }

// Faults is faults.log, the journal of the faults `podflow chaos`
// injected (pauses, network faults) at the time it injected them.
func (l Layout) Faults() string { return filepath.Join(l.Dir, "faults.log") }

// Metrics is metrics.json: process name → /metrics address.
func (l Layout) Metrics() string { return filepath.Join(l.Dir, "metrics.json") }

// Cluster is cluster.json, the addresses chosen at first start.
func (l Layout) Cluster() string { return filepath.Join(l.Dir, "cluster.json") }

// ConsoleAddr is where `up` keeps its console's address, so that it is
// the same after a restart.
func (l Layout) ConsoleAddr() string { return filepath.Join(l.Dir, "console.addr") }

// RegistryAddr is the file the registry writes its address to.
func (l Layout) RegistryAddr() string { return filepath.Join(l.Dir, "registry.addr") }

// Sub is a directory of the data directory (a store replica's, a NATS
// server's, the registry's).
func (l Layout) Sub(name ...string) string { return filepath.Join(append([]string{l.Dir}, name...)...) }

// PKI is a file of the data directory's PKI (DATA/pki): the cluster CA
// (ca.crt), the Kubernetes API's certificates and, with TLS, the bus's and
// the store's.
func (l Layout) PKI(name ...string) string {
	return filepath.Join(append([]string{l.Dir, "pki"}, name...)...)
}

// BusTLS are the TLS files of role's bus client (DATA/pki/bus/<role>.crt:
// CN podflow:bus:<role>, client authentication only).
func (l Layout) BusTLS(role string) bus.TLSFiles {
	return bus.TLSFiles{CAFile: l.PKI("ca.crt"), CertFile: l.PKI("bus", role+".crt"), KeyFile: l.PKI("bus", role+".key")}
}

// NATSServerTLS are the TLS files of the NATS servers (group
// bus.ServerGroup; they serve clients and routes and dial routes).
func (l Layout) NATSServerTLS() bus.TLSFiles {
	return bus.TLSFiles{CAFile: l.PKI("ca.crt"), CertFile: l.PKI("nats-server.crt"), KeyFile: l.PKI("nats-server.key")}
}

// EncryptionConfig is the store's encryption at rest configuration
// (DATA/encryption-config.yaml, kube-apiserver's EncryptionConfiguration,
// mode 0600): `up` writes it on first start and gives it to every replica.
func (l Layout) EncryptionConfig() string { return filepath.Join(l.Dir, "encryption-config.yaml") }

// RaftTLS are the TLS files of store replica id's raft transport
// (DATA/pki/raft-<id>.crt: CN podflow:raft:<id>, group
// raftstore.PeerGroup): each replica has its own.
func (l Layout) RaftTLS(id string) bus.TLSFiles {
	return bus.TLSFiles{CAFile: l.PKI("ca.crt"), CertFile: l.PKI("raft-" + id + ".crt"), KeyFile: l.PKI("raft-" + id + ".key")}
}

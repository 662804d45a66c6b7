package raftstoretest

import (
	"crypto/tls"
	"testing"

	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/raftstore"
)

// CA is a throwaway certificate authority for mutual-TLS tests
// (bustest.CA: the same one serves NATS and raft).
type CA = bustest.CA

// NewCA creates a CA valid for an hour.
func NewCA(t testing.TB, name string) *CA { return bustest.NewCA(t, name) }

// MutualTLS returns the raft transport configuration of a peer named name
// in groups (raftstore.MutualTLSConfig with a certificate from ca that
// requires raftstore.PeerGroup of the other side).
func MutualTLS(t testing.TB, ca *CA, name string, groups ...string) *tls.Config {
	t.Helper()
	return raftstore.MutualTLSConfig(ca.Peer(t, name, groups...), ca.Pool, raftstore.PeerGroup)
}

// WithTLS is an Option that runs every replica's raft transport over mutual
// TLS with a certificate from ca.
func WithTLS(t testing.TB, ca *CA) Option {
	cfg := MutualTLS(t, ca, "raft-peer", raftstore.PeerGroup)
	return func(c *raftstore.Config) { c.TLS = cfg }
}

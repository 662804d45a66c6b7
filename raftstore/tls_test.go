package raftstore_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// rogueStream is a raft.StreamLayer that dials with an attacker's TLS
// configuration (nil: plain TCP).
type rogueStream struct {
	net.Listener
	tls *tls.Config
}

func (s rogueStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.tls == nil {
		return net.DialTimeout("tcp", string(addr), timeout)
	}
	return (&tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.tls}).Dial("tcp", string(addr))
}

func rogueTransport(t *testing.T, cfg *tls.Config) *raft.NetworkTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: rogueStream{Listener: ln, tls: cfg}, MaxPool: 1, Timeout: 5 * time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{Output: io.Discard}),
	})
	t.Cleanup(func() { tr.CloseStreams(); _ = tr.Close() })
	return tr
}

// TestTLSTransportRefusesRoguePeers runs a cluster over mutual TLS and
// sends AppendEntries with a term far ahead of the cluster's to its leader,
// as a peer would that seizes leadership: without a client certificate, or
// with one from another CA, or in plain TCP, the connection fails at the
// handshake and the leader never takes the rogue's term. A peer with a certificate from
// the cluster's CA reaches raft (the control that shows the attack would
// land without the check).
func TestTLSTransportRefusesRoguePeers(t *testing.T) {
	ca := raftstoretest.NewCA(t, "podflow-ca")
	rogueCA := raftstoretest.NewCA(t, "rogue-ca")
	c := raftstoretest.MakeCluster(t, 3, raftstoretest.WithTLS(t, ca))
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cl.Create(ctx, "/registry/pods/default/a", []byte("a")); err != nil {
		t.Fatalf("create over a TLS cluster: %v", err)
	}
	c.WaitForReplication(t)

	otherCA := raftstoretest.MutualTLS(t, rogueCA, "raft-peer", raftstore.PeerGroup)
	otherCA.RootCAs = ca.Pool // it trusts the cluster; the cluster does not trust it
	noCert := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS13}
	for _, tc := range []struct {
		name    string
		tls     *tls.Config
		term    uint64
		refused bool
	}{
		{"plain TCP", nil, 1 << 40, true},
		{"TLS without a client certificate", noCert, 1 << 40, true},
		{"client certificate from another CA", otherCA, 1 << 40, true},
		// The control sends term 0, which raft answers (and ignores).
		// The CA signs clients too: a client's certificate is no peer's.
		{"certificate of the cluster's CA outside the peer group", raftstoretest.MutualTLS(t, ca, "admin", "system:masters"), 1 << 40, true},
		{"peer certificate of the cluster's CA", raftstoretest.MutualTLS(t, ca, "peer", raftstore.PeerGroup), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader := c.Node(c.Leader(t))
			before := leader.Stats().Term
			tr := rogueTransport(t, tc.tls)
			var resp raft.AppendEntriesResponse
			err := tr.AppendEntries("rogue", raft.ServerAddress(leader.RaftAddr()), &raft.AppendEntriesRequest{
				RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue"), Addr: []byte(tr.LocalAddr())},
				Term:      tc.term, Leader: []byte(tr.LocalAddr()),
			}, &resp)
			if tc.refused {
				if err == nil {
					t.Fatalf("AppendEntries from a rogue peer succeeded: %+v", resp)
				}
				// A peer that saw the rogue's term takes it: any term at or
				// past it is the attack landing. The leader may step down or
				// hold an election under load (a smaller term, or the same);
				// that is not the rogue's doing.
				if after := leader.Stats().Term; after >= tc.term {
					t.Fatalf("leader term %d -> %d: the rogue RPC reached raft", before, after)
				}
				return
			}
			if err != nil {
				t.Fatalf("AppendEntries from a peer of the cluster's CA: %v", err)
			}
			if resp.Success || resp.Term != before {
				t.Fatalf("response %+v, want a refusal at term %d", resp, before)
			}
		})
	}
	if _, err := cl.Create(ctx, "/registry/pods/default/b", []byte("b")); err != nil {
		t.Fatalf("write after the attacks: %v", err)
	}
	// The peers of the cluster's CA still elect, replicate and join over TLS.
	c.Add(t, "r3")
	c.Kill(t, c.Leader(t))
	c.Leader(t)
	if _, err := cl.Create(ctx, "/registry/pods/default/c", []byte("c")); err != nil {
		t.Fatalf("write after a failover over TLS: %v", err)
	}
	c.WaitForReplication(t)
}

// TestConfigRaftNeedsTLS: no raft address, loopback or not, is accepted
// without mutual TLS, and with it any address is.
func TestConfigRaftNeedsTLS(t *testing.T) {
	ca := raftstoretest.NewCA(t, "podflow-ca")
	for _, tc := range []struct {
		addr    string
		tls     bool
		wantErr bool
	}{
		{"127.0.0.1:7001", false, true},
		{"localhost:7001", false, true},
		{"[::1]:7001", false, true},
		{"0.0.0.0:7001", false, true},
		{"10.0.0.5:7001", false, true},
		{"127.0.0.1:7001", true, false},
		{"0.0.0.0:7001", true, false},
		{"10.0.0.5:7001", true, false},
	} {
		t.Run(fmt.Sprintf("%s TLS %v", tc.addr, tc.tls), func(t *testing.T) {
			cfg := raftstore.DefaultConfig()
			cfg.ID, cfg.DataDir, cfg.RaftAddr = "r0", t.TempDir(), tc.addr
			cfg.Conn = &nats.Conn{}
			if tc.tls {
				cfg.TLS = raftstoretest.MutualTLS(t, ca, "r0", raftstore.PeerGroup)
			}
			err := cfg.Validate()
			if tc.wantErr != (err != nil && strings.Contains(err.Error(), "TLS is required")) {
				t.Fatalf("Validate() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

// TestTLSPeerGroupEnforced: a replica whose TLS configuration checks no
// group (built by hand, not by MutualTLSConfig) still refuses a peer whose
// certificate of the cluster CA is outside PeerGroup: the check is the
// store's, not its caller's.
func TestTLSPeerGroupEnforced(t *testing.T) {
	ca := raftstoretest.NewCA(t, "podflow-ca")
	lax := raftstoretest.MutualTLS(t, ca, "raft-peer", raftstore.PeerGroup)
	lax.VerifyConnection = nil
	c := raftstoretest.MakeCluster(t, 1, func(cfg *raftstore.Config) { cfg.TLS = lax })
	leader := c.Node(c.Leader(t))
	before := leader.Stats().Term
	for _, groups := range [][]string{{"podflow:bus"}, {"system:masters"}, nil} {
		tr := rogueTransport(t, raftstoretest.MutualTLS(t, ca, "client", groups...))
		var resp raft.AppendEntriesResponse
		err := tr.AppendEntries("rogue", raft.ServerAddress(leader.RaftAddr()), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue"), Addr: []byte(tr.LocalAddr())},
			Term:      1 << 40, Leader: []byte(tr.LocalAddr()),
		}, &resp)
		if err == nil {
			t.Fatalf("AppendEntries with a certificate in groups %v reached raft: %+v", groups, resp)
		}
	}
	if after := leader.Stats().Term; after != before || !leader.IsLeader() {
		t.Fatalf("leader term %d -> %d (leader %v): a rogue RPC reached raft", before, after, leader.IsLeader())
	}
}

package up

import (
	"os"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/services/apiserver/pki"
)

// loopbackHosts are the names a certificate of `up` is valid for.
var loopbackHosts = []string{"127.0.0.1", "localhost", "::1"}

// ensureRaftTLS issues, at first start (later starts reuse them), one
// raft certificate per store replica in replicas from the cluster CA: CN
// podflow:raft:<id>, valid for loopback and the name <id>, group
// raftstore.PeerGroup. A replica presents its own, so a peer knows which
// one it speaks to; the group check keeps a client's certificate of the
// same CA from speaking raft. Raft is mutual TLS on one machine too: any
// local user can open a loopback port.
func ensureRaftTLS(l plan.Layout, ca *pki.CA, replicas []string) error {
	for _, id := range replicas {
		f := l.RaftTLS(id)
		if err := issueOnce(ca, f.CertFile, f.KeyFile, certRequest("raft-peer", id, append([]string{id}, loopbackHosts...))); err != nil {
			return err
		}
	}
	return nil
}

// ensureClusterTLS issues, at first start, the certificates of `up
// --cluster`'s NATS transports from the cluster CA (later starts reuse
// them):
//
//   - the NATS servers' (group bus.ServerGroup: clients and routes),
//   - one bus client certificate per NATS user, CN podflow:bus:<role>.
//
// The group check keeps a client's certificate of the same CA from opening
// a route; the Kubernetes API binds none of these names.
func ensureClusterTLS(l plan.Layout, ca *pki.CA, creds bus.Credentials) error {
	nats := l.NATSServerTLS()
	if err := issueOnce(ca, nats.CertFile, nats.KeyFile, certRequest("nats-server", "server", loopbackHosts)); err != nil {
		return err
	}
	if err := os.MkdirAll(l.PKI("bus"), 0o700); err != nil {
		return err
	}
	for _, u := range creds.Users {
		f := l.BusTLS(u.Role)
		if err := issueOnce(ca, f.CertFile, f.KeyFile, certRequest("bus-client", u.Role, nil)); err != nil {
			return err
		}
	}
	return nil
}

// busTLS are the TLS files of role's bus client file: none on one
// machine's loopback.
func (u *up) busTLS(role string) bus.TLSFiles {
	if !u.plan.Options.TLS {
		return bus.TLSFiles{}
	}
	return u.layout.BusTLS(role)
}

package up

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/processes/join"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/services/apiserver/pki"
)

// certKinds are the certificates IssueCert makes, and whether one
// needs --hosts (a peer's: its peers dial it).
var certKinds = map[string]bool{join.KindNATSServer: true, join.KindRaftPeer: true, join.KindBusClient: false}

// IssueBusClientCert issues, once, the bus client certificate of role
// (CN podflow:bus:<role>) from the data directory's cluster CA, as up
// issues the roles' own, and returns its files: for a user of the bus
// added after up (podflow config bus-user) on a cluster with TLS.
func IssueBusClientCert(l plan.Layout, role string) (bus.TLSFiles, error) {
	ca, err := pki.LoadCA(l.PKI("ca.crt"), l.PKI("ca.key"))
	if err != nil {
		return bus.TLSFiles{}, fmt.Errorf("the cluster CA: %w", err)
	}
	if err := os.MkdirAll(l.PKI("bus"), 0o700); err != nil {
		return bus.TLSFiles{}, err
	}
	f := l.BusTLS(role)
	return f, issueOnce(ca, f.CertFile, f.KeyFile, certRequest("bus-client", role, nil))
}

// certRequest is the certificate of kind (a key of certKinds) for name.
func certRequest(kind, name string, hosts []string) pki.Request {
	r, _ := join.CertRequest(kind, name, hosts)
	return r
}

// IssueCert issues the certificate of kind (nats-server, raft-peer or
// bus-client) for name, valid for hosts, from the cluster CA in caDir
// (ca.crt, ca.key; created when missing and initCA is set), to out.crt
// and out.key, kept when they exist (`podflow pki issue`). It returns
// what it issued.
func IssueCert(caDir string, initCA bool, kind, name string, hosts []string, out string) (pki.Request, error) {
	peer, ok := certKinds[kind]
	if !ok {
		return pki.Request{}, fmt.Errorf("--kind %q: want nats-server, raft-peer or bus-client", kind)
	}
	if name == "" || out == "" {
		return pki.Request{}, errors.New("--name and --out are required")
	}
	if peer && len(hosts) == 0 {
		return pki.Request{}, fmt.Errorf("a %s certificate needs --hosts (the addresses its peers dial)", kind)
	}
	certFile, keyFile := filepath.Join(caDir, "ca.crt"), filepath.Join(caDir, "ca.key")
	ca, err := pki.LoadCA(certFile, keyFile)
	if errors.Is(err, os.ErrNotExist) && initCA {
		if err = os.MkdirAll(caDir, 0o700); err == nil {
			if ca, err = pki.NewCA("podflow-ca"); err == nil {
				err = ca.WriteFiles(certFile, keyFile)
			}
		}
	}
	if err != nil {
		return pki.Request{}, fmt.Errorf("cluster CA in %q: %w", caDir, err)
	}
	r := certRequest(kind, name, hosts)
	if err := issueOnce(ca, out+".crt", out+".key", r); err != nil {
		return pki.Request{}, err
	}
	return r, nil
}

package join

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/pipeline"
)

// Certificate kinds: what each proves and to whom (docs/multi-machine.md).
const (
	KindNATSServer = "nats-server" // a NATS server: clients and routes (group bus.ServerGroup)
	KindRaftPeer   = "raft-peer"   // a store replica's raft transport (group raftstore.PeerGroup)
	KindAPIServer  = "apiserver"   // the Kubernetes API's serving certificate
	KindBusClient  = "bus-client"  // a process's NATS client, CN podflow:bus:<role>
	// busKindPrefix starts the join kind of a bus client certificate:
	// "bus:<role>".
	busKindPrefix = "bus:"
)

// BusKind is the join kind of role's bus client certificate.
func BusKind(role string) string { return busKindPrefix + role }

// CertRequest is the certificate of kind for name (a host, a replica or a
// bus role), valid for hosts (the names and addresses its peers dial; a
// bus client's has none).
func CertRequest(kind, name string, hosts []string) (pki.Request, error) {
	switch kind {
	case KindNATSServer:
		return pki.Request{CommonName: "podflow:nats:" + name, Groups: []string{bus.ServerGroup}, Hosts: hosts, Server: true, Peer: true}, nil
	case KindRaftPeer:
		return pki.Request{CommonName: "podflow:raft:" + name, Groups: []string{raftstore.PeerGroup}, Hosts: hosts, Server: true, Peer: true}, nil
	case KindAPIServer:
		return pki.Request{CommonName: "podflow-apiserver", Hosts: hosts, Server: true}, nil
	case KindBusClient:
		return pki.Request{CommonName: "podflow:bus:" + name}, nil
	}
	return pki.Request{}, fmt.Errorf("certificate kind %q: want %s, %s, %s or %s", kind, KindNATSServer, KindRaftPeer, KindAPIServer, KindBusClient)
}

// Kinds are the certificates a host named name holds: a node agent's bus
// identity; a server's also its NATS server's, its store replica's, its
// Kubernetes API's, and the bus identities of its processes (the store,
// every stage, and the admin of its `podflow up`).
func Kinds(name string, agent bool) []string {
	kinds := []string{BusKind(pipeline.NodeRole(name))}
	if agent {
		return kinds
	}
	kinds = append(kinds, KindNATSServer, KindRaftPeer, KindAPIServer, BusKind(bus.RoleAdmin), BusKind(pipeline.RoleStore))
	for _, s := range pipeline.Stages {
		kinds = append(kinds, BusKind(pipeline.StageRole(s)))
	}
	return kinds
}

// SimulatedKind is the certificate of a host's simulated cluster's bus
// identity (pipeline.SimNodesRole): it may act for any node, so only a
// request that says Simulated gets it.
func SimulatedKind(name string) string { return BusKind(pipeline.SimNodesRole(name)) }

// request is the certificate the join issues for kind to host name at
// address advertise: its own names only.
func request(kind, name, advertise string) (pki.Request, error) {
	if role, ok := strings.CutPrefix(kind, busKindPrefix); ok {
		return CertRequest(KindBusClient, role, nil)
	}
	return CertRequest(kind, name, []string{advertise, name})
}

// NewKeys generates a key per kind and a certificate request for each;
// it returns the requests to send (PEM, by kind) and the keys to keep
// (PKCS#8 PEM, by kind). The requests' subjects say nothing: the server
// decides what each certificate is for.
func NewKeys(kinds []string) (csrs, keys map[string]string, err error) {
	csrs, keys = map[string]string{}, map[string]string{}
	for _, kind := range kinds {
		c, k, err := NewKeysFor(kind, &x509.CertificateRequest{})
		if err != nil {
			return nil, nil, err
		}
		csrs[kind], keys[kind] = c[kind], k[kind]
	}
	return csrs, keys, nil
}

// NewKeysFor is NewKeys of one kind with the request tmpl (what it asks
// for is not what the server issues: tests send greedy requests).
func NewKeysFor(kind string, tmpl *x509.CertificateRequest) (csrs, keys map[string]string, err error) {
	csrs, keys = map[string]string{}, map[string]string{}
	{
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, k)
		if err != nil {
			return nil, nil, err
		}
		kp, err := pki.KeyPEM(k)
		if err != nil {
			return nil, nil, err
		}
		csrs[kind] = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
		keys[kind] = string(kp)
	}
	return csrs, keys, nil
}

// parseCSR reads a PEM certificate request and checks that its key signed
// it (the joiner holds the key).
func parseCSR(p string) (*x509.CertificateRequest, error) {
	blk, _ := pem.Decode([]byte(p))
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("not a PEM certificate request")
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, err
	}
	return csr, nil
}

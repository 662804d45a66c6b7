package raftstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// tlsStreamLayer is a raft.StreamLayer over mutual TLS: the listener
// requires and verifies a client certificate against the configured CA,
// and every dial presents this replica's certificate and verifies the
// peer's serving certificate against the same CA. A peer without a
// certificate from that CA fails at the handshake and never reaches raft.
//
// Handshakes of accepted connections run each in its own goroutine with a
// deadline, so a slow or silent dialer delays no one else; Accept returns
// only connections whose handshake succeeded.
type tlsStreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	cfg       *tls.Config

	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	acceptErr error // set before done is closed by the accept loop
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

// handshakeTimeout bounds the TLS handshake of a dialled or accepted
// connection.
const handshakeTimeout = 10 * time.Second

// checkTLS reports what makes cfg unusable as a raft transport's
// mutual-TLS configuration (nil when it is usable).
func checkTLS(cfg *tls.Config) error {
	switch {
	case cfg == nil:
		return fmt.Errorf("%w: TLS is required: raft accepts only peers with a certificate of the cluster CA in group %q, on loopback too (see MutualTLS)", ErrTLSConfig, PeerGroup)
	case cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil || cfg.RootCAs == nil || (len(cfg.Certificates) == 0 && cfg.GetCertificate == nil):
		return fmt.Errorf("%w: raft TLS needs a certificate, RootCAs, ClientCAs and ClientAuth RequireAndVerifyClientCert (see MutualTLS)", ErrTLSConfig)
	}
	return nil
}

// peerTLS is cfg requiring, whatever else cfg checks, that the other side's
// certificate carries PeerGroup: the CA signs the bus's and the Kubernetes
// API's clients too, and none of those may speak raft.
func peerTLS(cfg *tls.Config) *tls.Config {
	cfg = cfg.Clone()
	if cfg.MinVersion < tls.VersionTLS13 {
		cfg.MinVersion = tls.VersionTLS13
	}
	inner := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := verifyPeerGroup(cs, PeerGroup); err != nil {
			return err
		}
		if inner != nil {
			return inner(cs)
		}
		return nil
	}
	return cfg
}

// streamLayer is the raft transport's stream layer, mutual TLS over the
// replica's listener (Config.RaftListener, else RaftAddr bound now). Peers
// dial advertise, or the listener's address.
func (n *Node) streamLayer(advertise net.Addr) (raft.StreamLayer, error) {
	if err := checkTLS(n.cfg.TLS); err != nil {
		return nil, err
	}
	ln := n.cfg.RaftListener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", n.cfg.RaftAddr); err != nil {
			return nil, err
		}
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if a, ok := advertise.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raftstore: advertise address %v is not a dialable IP address", advertise)
	}
	return newTLSStreamLayer(ln, advertise, peerTLS(n.cfg.TLS)), nil
}

// newTLSStreamLayer accepts on ln with cfg, which requires and verifies
// client certificates (checked by Node.streamLayer).
func newTLSStreamLayer(ln net.Listener, advertise net.Addr, cfg *tls.Config) *tlsStreamLayer {
	l := &tlsStreamLayer{ln: ln, advertise: advertise, cfg: cfg, conns: make(chan net.Conn), done: make(chan struct{})}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

func (l *tlsStreamLayer) acceptLoop() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			l.closeOnce.Do(func() { l.acceptErr = err; close(l.done) })
			return
		}
		l.wg.Add(1)
		go l.handshake(tls.Server(c, l.cfg))
	}
}

func (l *tlsStreamLayer) handshake(tc *tls.Conn) {
	defer l.wg.Done()
	_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		tc.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	select {
	case l.conns <- tc:
	case <-l.done:
		tc.Close()
	}
}

// Accept returns the next connection whose mutual-TLS handshake succeeded.
func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		if l.acceptErr != nil {
			return nil, l.acceptErr
		}
		return nil, net.ErrClosed
	}
}

// Close stops listening; connections already returned stay open.
// Idempotent.
func (l *tlsStreamLayer) Close() error {
	err := l.ln.Close()
	l.closeOnce.Do(func() { close(l.done) })
	l.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Addr is the address peers dial (the advertise address).
func (l *tlsStreamLayer) Addr() net.Addr { return l.advertise }

// Dial opens a TLS connection to a peer and completes the handshake within
// timeout, verifying the peer's certificate against the CA.
func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: l.cfg}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, "tcp", string(address))
}

// PeerGroup is the group (certificate subject Organization) a raft
// peer's certificate must carry: the CA also signs clients' certificates
// (of the bus, of the Kubernetes API), and none of those may speak raft.
const PeerGroup = "podflow:raft-peers"

// TLSFiles names PEM files of a replica's mutual-TLS identity: its
// certificate and key (used both to serve and to dial, so the certificate
// needs the serverAuth and clientAuth extended key usages) and the CA that
// signs every peer's certificate.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// ErrTLSConfig is wrapped when a TLS configuration cannot be used.
var ErrTLSConfig = errors.New("raftstore: invalid TLS configuration")

// MutualTLS builds a mutual-TLS configuration from files (see
// MutualTLSConfig): for a replica's raft transport, group PeerGroup.
func MutualTLS(f TLSFiles, group string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: key pair %q/%q: %w", ErrTLSConfig, f.CertFile, f.KeyFile, err)
	}
	caPEM, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("%w: CA %q: %w", ErrTLSConfig, f.CAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: CA %q holds no PEM certificate", ErrTLSConfig, f.CAFile)
	}
	return MutualTLSConfig(cert, pool, group), nil
}

// MutualTLSConfig presents cert, requires the peer's certificate in both
// directions, verifies it against ca and, with group set, requires the
// peer's certificate subject to carry group in its Organization; TLS 1.3
// only.
func MutualTLSConfig(cert tls.Certificate, ca *x509.CertPool, group string) *tls.Config {
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      ca,
		ClientCAs:    ca,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
	if group != "" {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyPeerGroup(cs, group) }
	}
	return cfg
}

// verifyPeerGroup requires the other side's certificate subject to carry
// group in its Organization.
func verifyPeerGroup(cs tls.ConnectionState, group string) error {
	if len(cs.PeerCertificates) == 0 || !slices.Contains(cs.PeerCertificates[0].Subject.Organization, group) {
		return fmt.Errorf("%w: the peer's certificate is not in group %q", ErrTLSConfig, group)
	}
	return nil
}

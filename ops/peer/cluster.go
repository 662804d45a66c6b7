package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
)

// proc is one process the bench started; it is stopped by its PID.
type proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// procs are the processes of one system, stopped in reverse order.
type procs struct {
	mu   sync.Mutex
	list []*proc
}

// start runs bin with args, its output into logDir/<name>.log. The child
// gets SIGKILL if the bench dies without stopping it.
func (ps *procs) start(name, bin string, args []string, env []string, logDir string) (*proc, error) {
	log, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &proc{Name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

func (p *proc) PID() int { return p.cmd.Process.Pid }

// exited is an error when p has already stopped.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) exited: %v", p.Name, p.PID(), p.err)
	default:
		return nil
	}
}

// stopAll sends SIGTERM to each process by its PID, newest first, and
// SIGKILL to one still running after grace.
func (ps *procs) stopAll(grace time.Duration) {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		p := list[i]
		select {
		case <-p.done:
			continue
		default:
		}
		_ = syscall.Kill(p.PID(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(p.PID(), syscall.SIGKILL)
			<-p.done
		}
	}
}

// cpu is the CPU time of each running process, by name.
func (ps *procs) cpu() (map[string]time.Duration, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := map[string]time.Duration{}
	for _, p := range ps.list {
		d, err := readProcCPU(p.PID())
		if err != nil {
			return nil, fmt.Errorf("CPU of %s: %w", p.Name, err)
		}
		out[p.Name] = d
	}
	return out, nil
}

// freePorts are n distinct loopback ports free at the time of the call.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// writePKI writes a CA, kube-apiserver's serving certificate for loopback,
// a system:masters client certificate in a kubeconfig for every client, and
// the service account signing key, into dir.
func writePKI(dir string, apiPort int) (pki, error) {
	p := pki{
		CACert:     filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "apiserver.crt"),
		ServerKey:  filepath.Join(dir, "apiserver.key"),
		SAKey:      filepath.Join(dir, "sa.key"),
		Kubeconfig: filepath.Join(dir, "admin.kubeconfig"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "podflow-peer-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return p, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, err
	}
	issue := func(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) ([]byte, []byte, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      subject,
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return nil, nil, err
		}
		keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	srvCert, srvKey, err := issue(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return p, err
	}
	cliCert, cliKey, err := issue(3, pkix.Name{CommonName: "podflow-peer-admin", Organization: []string{"system:masters"}},
		x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return p, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	saPEM, err := keyutil.MarshalPrivateKeyToPEM(saKey)
	if err != nil {
		return p, err
	}
	for path, b := range map[string][]byte{p.CACert: caPEM, p.ServerCert: srvCert, p.ServerKey: srvKey, p.SAKey: saPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return p, err
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["peer"] = &clientcmdapi.Cluster{Server: fmt.Sprintf("https://127.0.0.1:%d", apiPort), CertificateAuthorityData: caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cliCert, ClientKeyData: cliKey}
	cfg.Contexts["peer"] = &clientcmdapi.Context{Cluster: "peer", AuthInfo: "admin"}
	cfg.CurrentContext = "peer"
	return p, clientcmd.WriteToFile(*cfg, p.Kubeconfig)
}

// waitHTTP polls url until it answers 200, p stops, or ctx ends.
func waitHTTP(ctx context.Context, url string, ps ...*proc) error {
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		for _, p := range ps {
			if err := p.exited(); err != nil {
				return err
			}
		}
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("waiting for %s: %w", url, ctx.Err()), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

package up

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/auth"
)

// KubeFiles are the Kubernetes API front door's files in the data dir:
// the cluster CA, the API server's serving certificate, the admin's
// client certificate and a kubeconfig using it.
type KubeFiles struct {
	Addr                    string // 127.0.0.1:PORT, chosen at first start
	CACert, CAKey           string
	ServingCert, ServingKey string
	AdminCert, AdminKey     string
	Kubeconfig              string
	SAKey                   string // signs bound ServiceAccount tokens (TokenRequest)
	// FrontProxyCACert is the front-proxy CA (its own, as kube's: what it
	// signs may name any user to an extension API server), and
	// ProxyClientCert the aggregator's client certificate it signs (CN
	// FrontProxyClientName).
	FrontProxyCACert, FrontProxyCAKey string
	ProxyClientCert, ProxyClientKey   string
	ca                                *pki.CA // the cluster CA, which also signs the bus's and the store's certificates
}

// stageArgs are the api stage's HTTPS flags. Every api replica binds the
// same address (SO_REUSEPORT): one kubeconfig server for all of them.
func (k *KubeFiles) stageArgs() []string {
	return []string{"--https-addr", k.Addr, "--tls-cert-file", k.ServingCert, "--tls-private-key-file", k.ServingKey,
		"--client-ca-file", k.CACert, "--service-account-signing-key-file", k.SAKey,
		"--proxy-client-cert-file", k.ProxyClientCert, "--proxy-client-key-file", k.ProxyClientKey,
		"--requestheader-client-ca-file", k.FrontProxyCACert, "--requestheader-allowed-names", FrontProxyClientName}
}

// The front-proxy files in DATA/pki, as kubeadm names them.
const (
	frontProxyCACert, frontProxyCAKey         = "front-proxy-ca.crt", "front-proxy-ca.key"
	frontProxyClientCert, frontProxyClientKey = "front-proxy-client.crt", "front-proxy-client.key"
)

// ensureFrontProxy creates, once, the first server of a cluster of
// several machines' front-proxy CA and the aggregator's client
// certificate it signs (CN FrontProxyClientName); the joins hand the CA
// certificate and the client certificate to every other server, so each
// api replica proxies to extension API servers as the single-host up's do.
func ensureFrontProxy(l plan.Layout) error {
	fp, err := pki.LoadCA(l.PKI(frontProxyCACert), l.PKI(frontProxyCAKey))
	if errors.Is(err, os.ErrNotExist) {
		if fp, err = pki.NewCA("podflow-front-proxy-ca"); err == nil {
			err = fp.WriteFiles(l.PKI(frontProxyCACert), l.PKI(frontProxyCAKey))
		}
	}
	if err != nil {
		return fmt.Errorf("front-proxy CA: %w", err)
	}
	return issueOnce(fp, l.PKI(frontProxyClientCert), l.PKI(frontProxyClientKey), pki.Request{CommonName: FrontProxyClientName})
}

// FrontProxyClientName is the common name of the aggregator's front-proxy
// client certificate (kubeadm's), the requestheader allowed name.
const FrontProxyClientName = "front-proxy-client"

// ensureKube creates, at first start, the cluster CA (DATA/pki/ca.crt,
// ca.key), the serving certificate for 127.0.0.1/localhost and the
// kubernetes Service (servingHosts), the admin
// client certificate (CN=admin, O=system:masters) and DATA/kubeconfig;
// later starts reuse them. port 0 picks a free port once and remembers it.
func ensureKube(dir string, port int, serviceCIDR string) (*KubeFiles, error) {
	k, saved, err := KubePaths(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(k.CACert), 0o700); err != nil {
		return nil, err
	}
	addrFile := KubeAddrFile(dir)
	switch {
	case port > 0:
		k.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	case saved != "":
		k.Addr = saved
	default:
		addr, err := plan.FreeAddr()
		if err != nil {
			return nil, err
		}
		k.Addr = addr
	}
	if k.Addr != saved {
		b, _ := json.Marshal(map[string]string{"addr": k.Addr})
		if err := os.WriteFile(addrFile, b, 0o644); err != nil {
			return nil, err
		}
	}

	ca, err := pki.LoadCA(k.CACert, k.CAKey)
	if errors.Is(err, os.ErrNotExist) {
		if ca, err = pki.NewCA("podflow-ca"); err == nil {
			err = ca.WriteFiles(k.CACert, k.CAKey)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	k.ca = ca
	// Created here, not by the api replicas that start together: they
	// must all sign with the same key.
	if _, err := auth.LoadOrCreateSigningKey(k.SAKey); err != nil {
		return nil, err
	}
	hosts := servingHosts(serviceCIDR)
	if !certCovers(k.ServingCert, hosts) {
		_ = os.Remove(k.ServingCert) // issued again, with the kubernetes Service's names
	}
	if err := issueOnce(ca, k.ServingCert, k.ServingKey, pki.Request{CommonName: "podflow-apiserver",
		Hosts: hosts, Server: true}); err != nil {
		return nil, err
	}
	fp, err := pki.LoadCA(k.FrontProxyCACert, k.FrontProxyCAKey)
	if errors.Is(err, os.ErrNotExist) {
		if fp, err = pki.NewCA("podflow-front-proxy-ca"); err == nil {
			err = fp.WriteFiles(k.FrontProxyCACert, k.FrontProxyCAKey)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("front-proxy CA: %w", err)
	}
	if err := issueOnce(fp, k.ProxyClientCert, k.ProxyClientKey, pki.Request{CommonName: FrontProxyClientName}); err != nil {
		return nil, err
	}
	if err := issueOnce(ca, k.AdminCert, k.AdminKey, pki.Request{CommonName: "admin", Groups: []string{"system:masters"}}); err != nil {
		return nil, err
	}
	cert, err := os.ReadFile(k.AdminCert)
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(k.AdminKey)
	if err != nil {
		return nil, err
	}
	kc := pki.Kubeconfig("https://"+k.Addr, ca.CertPEM, cert, key, "admin")
	if err := os.WriteFile(k.Kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	return k, nil
}

// KubeAddrFile is the file in data dir dir that holds the Kubernetes
// API's address, chosen at first start.
func KubeAddrFile(dir string) string { return filepath.Join(dir, "pki", "apiserver.json") }

// KubePaths are the front door's files in data dir dir, and the address
// saved at first start ("" before).
func KubePaths(dir string) (k *KubeFiles, addr string, err error) {
	pdir := filepath.Join(dir, "pki")
	k = &KubeFiles{
		CACert: filepath.Join(pdir, "ca.crt"), CAKey: filepath.Join(pdir, "ca.key"),
		ServingCert: filepath.Join(pdir, "apiserver.crt"), ServingKey: filepath.Join(pdir, "apiserver.key"),
		AdminCert: filepath.Join(pdir, "admin.crt"), AdminKey: filepath.Join(pdir, "admin.key"),
		Kubeconfig: filepath.Join(dir, "kubeconfig"), SAKey: filepath.Join(pdir, "sa.key"),
		FrontProxyCACert: filepath.Join(pdir, frontProxyCACert), FrontProxyCAKey: filepath.Join(pdir, frontProxyCAKey),
		ProxyClientCert: filepath.Join(pdir, frontProxyClientCert), ProxyClientKey: filepath.Join(pdir, frontProxyClientKey),
	}
	var saved struct {
		Addr string `json:"addr"`
	}
	if b, err := os.ReadFile(KubeAddrFile(dir)); err == nil {
		if err := json.Unmarshal(b, &saved); err != nil {
			return nil, "", fmt.Errorf("%s: %w", KubeAddrFile(dir), err)
		}
	}
	return k, saved.Addr, nil
}

func issueOnce(ca *pki.CA, certFile, keyFile string, r pki.Request) error {
	if _, err := os.Stat(certFile); err == nil {
		return nil
	}
	cert, key, err := ca.Issue(r)
	if err != nil {
		return fmt.Errorf("issue %q: %w", r.CommonName, err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, cert, 0o644)
}

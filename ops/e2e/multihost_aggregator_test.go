package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/services/apiserver/pki"
)

// aggregatorOnEveryHost checks the aggregator on every server's api
// replica: an extension API server (in the test, on loopback) requires a
// client certificate signed by the cluster's front-proxy CA — the first
// server's DATA/pki/front-proxy-ca.crt, as a real one reads it from
// kube-system/extension-apiserver-authentication — and an APIService
// routes wardle.example.com/v1alpha1 to it through an ExternalName
// Service. A request for its flunders sent to each host's API is proxied
// there with the front-proxy client certificate and the admin in
// X-Remote-User. A server without the front-proxy files (a joined host
// before up --join handed them over) answers 503.
func aggregatorOnEveryHost(t *testing.T, hosts []*host) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(hosts[0].dir, "pki", "front-proxy-ca.crt"))
	if err != nil {
		t.Fatalf("the first server's front-proxy CA: %v", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("front-proxy-ca.crt holds no PEM block")
	}
	frontProxyCA, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	serverCA, err := pki.NewCA("wardle-ca")
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := serverCA.Issue(pki.Request{CommonName: "wardle", Hosts: []string{"wardle.default.svc"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(frontProxyCA)
	ext := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/apis/wardle.example.com/v1alpha1" {
			_, _ = fmt.Fprint(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"wardle.example.com/v1alpha1",`+
				`"resources":[{"name":"flunders","singularName":"flunder","namespaced":true,"kind":"Flunder","verbs":["get","list"]}]}`)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"user": r.Header.Get("X-Remote-User"),
			"client": r.TLS.PeerCertificates[0].Subject.CommonName})
	}))
	ext.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	ext.StartTLS()
	t.Cleanup(ext.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(ext.URL, "https://"))

	kubeconfig := filepath.Join(hosts[0].dir, "kubeconfig")
	kubectl := func(server string, stdin string, args ...string) (string, error) {
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig, "--server", server, "--request-timeout", "10s"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	first := "https://" + net.JoinHostPort(hosts[0].ip, "6443")
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: wardle, namespace: default}
spec: {type: ExternalName, externalName: localhost}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.wardle.example.com}
spec:
  group: wardle.example.com
  version: v1alpha1
  groupPriorityMinimum: 2000
  versionPriority: 200
  caBundle: %s
  service: {namespace: default, name: wardle, port: %s}
`, base64.StdEncoding.EncodeToString(serverCA.CertPEM), port)
	if out, err := kubectl(first, manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the APIService: %v\n%s", err, out)
	}
	for _, h := range hosts {
		server := "https://" + net.JoinHostPort(h.ip, "6443")
		eventually(t, 60*time.Second, "flunders through "+h.name+"'s API", func() (bool, string) {
			out, err := kubectl(server, "", "get", "--raw", "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders")
			var seen map[string]string
			if err != nil || json.Unmarshal([]byte(out), &seen) != nil {
				return false, fmt.Sprint(out, err)
			}
			return seen["user"] == "admin" && seen["client"] == "front-proxy-client", out
		})
	}
}

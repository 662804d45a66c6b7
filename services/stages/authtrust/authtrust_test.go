package authtrust_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/authtrust"
)

func newCA(t *testing.T, name string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// certNames are the common names of the certificates of a PEM bundle.
func certNames(t *testing.T, bundle string) []string {
	t.Helper()
	var out []string
	rest := []byte(bundle)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c.Subject.CommonName)
	}
}

func strs(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return out
}

// TestConfigMap: api replicas passing at once create
// kube-system/extension-apiserver-authentication once with kube's keys
// (the CAs as PEM, the requestheader settings as JSON string arrays); a
// replica with another client CA and allowed name adds them, keeping
// what is there; a key removed by hand comes back at the next pass.
func TestConfigMap(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1)
	st := objects.New(c.Client(t))
	env := stage.Env{Store: st, Stage: "api", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	clientCA, frontProxyCA := newCA(t, "client-ca"), newCA(t, "front-proxy-ca")
	cfg := authtrust.DefaultConfig()
	cfg.ClientCA, cfg.RequestHeaderCA, cfg.AllowedNames = clientCA.CertPEM, frontProxyCA.CertPEM, []string{"front-proxy-client"}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 3 {
		ctl, err := authtrust.New(env, cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := ctl.Pass(ctx); err != nil {
				t.Errorf("pass: %v", err)
			}
		})
	}
	wg.Wait()
	cm, err := objects.Get[*corev1.ConfigMap](ctx, st, "kube-system", "extension-apiserver-authentication")
	if err != nil {
		t.Fatal(err)
	}
	d := cm.GetData()
	want := map[string]string{
		"client-ca-file":                     "client-ca",
		"requestheader-client-ca-file":       "front-proxy-ca",
		"requestheader-allowed-names":        `["front-proxy-client"]`,
		"requestheader-username-headers":     `["X-Remote-User"]`,
		"requestheader-group-headers":        `["X-Remote-Group"]`,
		"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
	}
	if len(d) != len(want) {
		t.Fatalf("keys %v, want those of %v", d, want)
	}
	for k, v := range want {
		got := d[k]
		if strings.HasSuffix(k, "-ca-file") {
			got = strings.Join(certNames(t, got), ",")
		}
		if got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}

	// Another api server's CA and name are added to what is there.
	other := cfg
	otherCA := newCA(t, "other-client-ca")
	other.ClientCA, other.AllowedNames = otherCA.CertPEM, []string{"aggregator"}
	ctl, err := authtrust.New(env, other)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	cm, _ = objects.Get[*corev1.ConfigMap](ctx, st, "kube-system", "extension-apiserver-authentication")
	if got := strings.Join(certNames(t, cm.GetData()["client-ca-file"]), ","); got != "client-ca,other-client-ca" {
		t.Errorf("client-ca-file after another api server's pass: %s", got)
	}
	if got := strs(t, cm.GetData()["requestheader-allowed-names"]); strings.Join(got, ",") != "front-proxy-client,aggregator" {
		t.Errorf("allowed names after another api server's pass: %v", got)
	}

	// A key removed by hand comes back.
	delete(cm.Data, "requestheader-client-ca-file")
	if _, err := st.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	cm, _ = objects.Get[*corev1.ConfigMap](ctx, st, "kube-system", "extension-apiserver-authentication")
	if got := strings.Join(certNames(t, cm.GetData()["requestheader-client-ca-file"]), ","); got != "front-proxy-ca" {
		t.Errorf("requestheader-client-ca-file after a pass: %q", got)
	}
}

// TestConfig: a client CA or front-proxy CA that holds no certificate is
// refused; without a front-proxy CA only client-ca-file is published.
func TestConfig(t *testing.T) {
	cfg := authtrust.DefaultConfig()
	env := stage.Env{}
	if _, err := authtrust.New(env, cfg); err == nil || !strings.Contains(err.Error(), "ClientCA") {
		t.Errorf("no client CA: %v", err)
	}
	cfg.ClientCA = newCA(t, "client-ca").CertPEM
	cfg.RequestHeaderCA = []byte("not a certificate")
	if _, err := authtrust.New(env, cfg); err == nil || !strings.Contains(err.Error(), "RequestHeaderCA") {
		t.Errorf("a front-proxy CA without certificates: %v", err)
	}

	c := raftstoretest.MakeCluster(t, 1)
	st := objects.New(c.Client(t))
	cfg.RequestHeaderCA = nil
	ctl, err := authtrust.New(stage.Env{Store: st}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ctl.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	cm, err := objects.Get[*corev1.ConfigMap](ctx, st, "kube-system", "extension-apiserver-authentication")
	if err != nil || len(cm.GetData()) != 1 || cm.GetData()["client-ca-file"] == "" {
		t.Fatalf("without a front-proxy CA: %v %v", cm.GetData(), err)
	}
}

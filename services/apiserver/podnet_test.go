package apiserver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/pipeline"
)

// TestPodListeners: once the store holds a node's pod CIDR whose gateway
// is an address of this machine (a node's bridge), the front door serves
// there too (pods reach it through the kubernetes Service), and the
// kubernetes Service's slice names that address; when the address is no
// longer a pod CIDR of the cluster the listener closes. The node's bridge
// is a bridge without ports podflow names and removes, with an address of
// the benchmarking range (198.18.0.0/15): nothing is routed off the
// machine.
func TestPodListeners(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to add a bridge")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	link := "pft" + hex.EncodeToString(b) // podflow's test link, ≤ 15 bytes
	gw, cidr := "198.18.77.1", "198.18.77.0/24"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	if out, err := exec.Command("ip", "-4", "addr", "show", "to", cidr).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Skipf("%s is in use on this machine: %s", cidr, out)
	}
	ip("link", "add", link, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", link).Run() })
	ip("addr", "add", gw+"/24", "dev", link)
	ip("link", "set", link, "up")

	s := startSystem(t, options{})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.url, "https://"))
	ctx := context.Background()
	key := pipeline.PodCIDRPrefix + strings.ReplaceAll(cidr, "/", "-")
	if _, err := s.store.KV().Create(ctx, key, []byte("node-x")); err != nil {
		t.Fatal(err)
	}
	admin := s.client(t, adminToken)
	// Pods ask by the kubernetes Service's names (the serving certificate's),
	// not by the gateway's address.
	tr := s.transport(nil)
	tr.TLSClientConfig.ServerName = "localhost"
	t.Cleanup(tr.CloseIdleConnections)
	viaGateway := &http.Client{Transport: bearer{token: adminToken, next: tr}, Timeout: 5 * time.Second}
	at := "https://" + net.JoinHostPort(gw, port)
	raftstoretest.WaitFor(t, 20*time.Second, "the front door on the gateway", func() bool {
		resp, err := viaGateway.Get(at + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	raftstoretest.WaitFor(t, 30*time.Second, "the kubernetes Service's endpoints on the gateway", func() bool {
		code, body, _ := do(t, admin, "GET", s.url+"/api/v1/namespaces/default/endpoints/kubernetes", "", "")
		if code != 200 {
			return false
		}
		subsets, _ := body["subsets"].([]any)
		if len(subsets) != 1 {
			return false
		}
		var addrs []string
		for _, a := range path(subsets[0].(map[string]any), "addresses").([]any) {
			addrs = append(addrs, a.(map[string]any)["ip"].(string))
		}
		return slices.Equal(addrs, []string{gw})
	})

	// No longer a pod CIDR of this cluster: the listener goes.
	kv, err := s.store.KV().Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.KV().Delete(ctx, key, kv.ModRevision); err != nil && err != raftstore.ErrNotFound {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 20*time.Second, "the gateway listener closed", func() bool {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(gw, port), time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
}

// TestKubernetesServiceServed: the api process keeps default/kubernetes
// (the first IP of the service CIDR, port 443 to the API's port) and its
// endpoints, shown as core/v1 Endpoints and as an EndpointSlice; without
// a pod network on the machine the endpoint is the front door's own
// address.
func TestKubernetesServiceServed(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(s.url, "https://"))
	raftstoretest.WaitFor(t, 20*time.Second, "default/kubernetes", func() bool {
		code, _, _ := do(t, admin, "GET", s.url+"/api/v1/namespaces/default/endpoints/kubernetes", "", "")
		return code == 200
	})
	code, svc, _ := do(t, admin, "GET", s.url+"/api/v1/namespaces/default/services/kubernetes", "", "")
	if code != 200 || path(svc, "spec.clusterIP") != "10.96.0.1" || path(svc, "metadata.labels.component") != "apiserver" {
		t.Fatalf("service: %d %v", code, svc)
	}
	p0 := path(svc, "spec.ports").([]any)[0].(map[string]any)
	if p0["name"] != "https" || p0["port"] != float64(443) || p0["targetPort"] == nil || p0["protocol"] != "TCP" {
		t.Errorf("service port %v", p0)
	}
	_, ep, _ := do(t, admin, "GET", s.url+"/api/v1/namespaces/default/endpoints/kubernetes", "", "")
	sub := path(ep, "subsets").([]any)[0].(map[string]any)
	if a := sub["addresses"].([]any)[0].(map[string]any)["ip"]; a != host {
		t.Errorf("endpoint address %v, want %s", a, host)
	}
	if p := sub["ports"].([]any)[0].(map[string]any); p["name"] != "https" || p["port"] != float64(mustAtoi(t, port)) {
		t.Errorf("endpoint port %v, want https %s", p, port)
	}
	code, sl, _ := do(t, admin, "GET", s.url+"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes", "", "")
	if code != 200 || path(sl, "metadata.labels").(map[string]any)["kubernetes.io/service-name"] != "kubernetes" {
		t.Errorf("slice: %d %v", code, sl)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

package network

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/network/networktest"
)

// TestPodToPodSurvivesGlobalForwardingChange: a write that changes
// net.ipv4.ip_forward (net.ipv4.conf.all.forwarding) copies the new value
// onto every interface, podflow's bridges included. On a machine whose
// ip_forward is 0, toggling it (sysctl -w net.ipv4.ip_forward=1, then back
// to 0) used to leave both bridges at 0, and pods of two nodes stopped
// reaching each other. The Manager now sets its bridge back to 1 and
// leaves the global value alone.
//
// The toggle must not touch the machine's own sysctls, so the two nodes
// live in a network namespace of the test's own (podflow-test-fwd-…),
// which stands for the host: bridges, policy rules and the global
// forwarding value there are the test's.
func TestPodToPodSurvivesGlobalForwardingChange(t *testing.T) {
	networktest.RequireRoot(t)
	hostForward := readProc(t, "/proc/sys/net/ipv4/ip_forward")
	t.Cleanup(func() {
		if now := readProc(t, "/proc/sys/net/ipv4/ip_forward"); now != hostForward {
			t.Errorf("the machine's net.ipv4.ip_forward changed from %s to %s", hostForward, now)
		}
	})
	name := fmt.Sprintf("podflow-test-fwd-%08x", rand.Uint32())
	ns, _, err := ensureNetns(name)
	if err != nil {
		t.Fatal(err)
	}
	ns.Close()
	t.Cleanup(func() {
		if err := deleteNetns(name); err != nil {
			t.Error(err)
		}
	})
	host := filepath.Join(NetnsDir, name)
	sysctl := func(key string) string {
		var v string
		if err := networktest.Do(host, func() error {
			b, err := os.ReadFile(filepath.Join("/proc/sys/net/ipv4/conf", key, "forwarding"))
			v = strings.TrimSpace(string(b))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	setGlobal := func(v string) {
		t.Helper()
		if err := networktest.Do(host, func() error {
			return os.WriteFile("/proc/sys/net/ipv4/conf/all/forwarding", []byte(v), 0o644)
		}); err != nil {
			t.Fatal(err)
		}
	}
	setGlobal("0") // as on a host that does not forward

	ctx := testContext(t)
	node := func(suffix, cidr string) *Manager {
		t.Helper()
		var m *Manager
		if err := networktest.Do(host, func() (err error) {
			m, err = New(DefaultConfig(name+"-"+suffix, cidr, t.TempDir()))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cleanupNode(t, m) })
		if err := m.EnsureBridge(ctx); err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := node("a", "10.244.1.0/24"), node("b", "10.244.2.0/24")
	a1, err := a.Setup(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	b1, err := b.Setup(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AddPeerRoute(ctx, b.cfg.PodCIDR, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeerRoute(ctx, a.cfg.PodCIDR, ""); err != nil {
		t.Fatal(err)
	}
	addr := listenIn(t, a1).Addr().String()
	if got, err := ask(b1.NetnsPath, addr); err != nil || got != b1.IP {
		t.Fatalf("across nodes: %q, %v; want seen from %s", got, err, b1.IP)
	}

	setGlobal("1")
	setGlobal("0") // every interface of the namespace now has forwarding 0
	deadline := time.Now().Add(5 * time.Second)
	for sysctl(a.cfg.BridgeName) != "1" || sysctl(b.cfg.BridgeName) != "1" {
		if time.Now().After(deadline) {
			t.Fatalf("after a global forwarding change: forwarding on %s = %s, on %s = %s; want 1 on both",
				a.cfg.BridgeName, sysctl(a.cfg.BridgeName), b.cfg.BridgeName, sysctl(b.cfg.BridgeName))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, k := range []string{"all", "default"} {
		if got := sysctl(k); got != "0" {
			t.Errorf("net.ipv4.conf.%s.forwarding = %s after the Manager restored its bridge; want 0 (never written)", k, got)
		}
	}
	if got, err := ask(b1.NetnsPath, addr); err != nil || got != b1.IP {
		t.Fatalf("across nodes after a global forwarding change: %q, %v; want seen from %s", got, err, b1.IP)
	}

	// Once the bridge is removed, nothing keeps forwarding on it.
	if err := a.RemoveBridge(ctx); err != nil {
		t.Fatal(err)
	}
	if a.keeper != nil {
		t.Error("RemoveBridge left the forwarding keeper running")
	}
}

func readProc(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

package network

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/podflow/podflow/nodeagent/linux/network/networktest"
)

// freshNetnsDirEnv tells a re-executed test binary that it runs in a
// mount namespace of its own (unshare --mount --propagation private),
// where it may unmount NetnsDir to see it as a fresh host does: a plain
// directory.
const freshNetnsDirEnv = "PODFLOW_TEST_FRESH_NETNS_DIR"

// TestNetnsCoexistsWithIPNetns runs `ip netns add` by someone else between
// a pod's Setup and Teardown, and asserts that nothing of the pod is left
// and that NetnsDir is one shared mount, not covered by a second one. It
// runs on the host as it is, and again in a private mount namespace where
// NetnsDir starts as a plain directory holding a namespace an older agent
// mounted there (so that podflow must make the layout itself and move
// that namespace into it).
func TestNetnsCoexistsWithIPNetns(t *testing.T) {
	networktest.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip")
	}
	if os.Getenv(freshNetnsDirEnv) == "1" {
		for mountedAt(t, NetnsDir) {
			if err := unmountAll(NetnsDir); err != nil {
				t.Fatal(err)
			}
		}
		coexistWithIPNetns(t, true)
		return
	}
	t.Run("host", func(t *testing.T) { coexistWithIPNetns(t, false) })
	t.Run("fresh NetnsDir", func(t *testing.T) {
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("needs util-linux's unshare")
		}
		// The child's mounts die with its mount namespace; the files it
		// made stay in the directory underneath: a failed child leaves them.
		t.Cleanup(func() {
			for _, pat := range []string{"podflow-pf*-coexist-*", "podflow-pf*-legacy-*"} {
				left, _ := filepath.Glob(filepath.Join(NetnsDir, pat))
				for _, f := range left {
					if !isNetnsMount(f) {
						t.Errorf("the child left %s", f)
						_ = os.Remove(f)
					}
				}
			}
		})
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", os.Args[0],
			"-test.run", "^TestNetnsCoexistsWithIPNetns$", "-test.count", "1", "-test.v")
		cmd.Env = append(os.Environ(), freshNetnsDirEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestNetnsCoexistsWithIPNetns") {
			t.Fatalf("in a private mount namespace: %v\n%s", err, out)
		}
	})
}

func coexistWithIPNetns(t *testing.T, legacy bool) {
	m := newNode(t, "")
	ctx := testContext(t)
	uids := []string{fmt.Sprintf("coexist-%08x", rand.Uint32())}
	if legacy {
		// What an agent before the shared layout left: a namespace
		// bind-mounted in the plain directory.
		old := fmt.Sprintf("legacy-%08x", rand.Uint32())
		if err := onLockedThread(func() error {
			ns, err := netns.NewNamed(m.NetnsName(old))
			if err == nil {
				ns.Close()
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = deleteNetns(m.NetnsName(old)) })
		uids = append(uids, old)
	}
	att, err := m.Setup(ctx, uids[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range uids {
		if path := NetnsDir + "/" + m.NetnsName(uid); !isNetnsMount(path) {
			t.Fatalf("%s is not a mounted netns after Setup", path)
		}
	}
	if shared := netnsDirMount(t); !strings.Contains(shared, "shared:") {
		t.Errorf("%s is not a shared mount point: %q", NetnsDir, shared)
	}
	other := fmt.Sprintf("pftest-%08x", rand.Uint32())
	if out, err := exec.Command("ip", "netns", "add", other).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", other, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", other).Run() })
	if n := countMounts(t, NetnsDir); n != 1 {
		t.Errorf("%d mounts on %s after `ip netns add`, want 1 (a covering mount)", n, NetnsDir)
	}
	if _, err := m.Setup(ctx, att.PodUID); err != nil { // still adopted as it is
		t.Fatalf("Setup again after `ip netns add`: %v", err)
	}
	for _, uid := range uids {
		if err := m.Teardown(ctx, uid); err != nil {
			t.Fatalf("Teardown %s after `ip netns add`: %v", uid, err)
		}
		requireGone(t, m, uid)
	}
	if out, err := exec.Command("ip", "netns", "delete", other).CombinedOutput(); err != nil {
		t.Fatalf("ip netns delete %s: %v\n%s", other, err, out)
	}
	if _, err := os.Lstat(NetnsDir + "/" + other); err == nil || mountedAt(t, NetnsDir+"/"+other) {
		t.Errorf("%s is left", other)
	}
}

// netnsDirMount returns the optional fields of NetnsDir's mount ("" when
// it is no mount point).
func netnsDirMount(t testing.TB) string {
	var out string
	eachMount(t, func(fields []string) {
		if fields[4] == NetnsDir {
			for _, f := range fields[6:] {
				if f == "-" {
					break
				}
				out += f + " "
			}
		}
	})
	return out
}

func countMounts(t testing.TB, path string) int {
	n := 0
	eachMount(t, func(fields []string) {
		if fields[4] == path {
			n++
		}
	})
	return n
}

func eachMount(t testing.TB, fn func(fields []string)) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 6 {
			fn(fields)
		}
	}
}

// TestEnsureBridgeRefusesACIDRInUse: a second node (another podflow
// system's, say) with a pod CIDR another podflow bridge serves is refused
// before it creates anything.
func TestEnsureBridgeRefusesACIDRInUse(t *testing.T) {
	m := newNode(t, "")
	cfg := DefaultConfig(fmt.Sprintf("podflow-test-twin-%d", rand.Int64()), m.cfg.PodCIDR, t.TempDir())
	twin, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer twin.Close()
	err = twin.EnsureBridge(testContext(t))
	if !errors.Is(err, ErrCIDRInUse) || !errors.Is(err, ErrSandbox) || !strings.Contains(err.Error(), m.cfg.BridgeName) {
		t.Fatalf("EnsureBridge of a twin CIDR = %v, want ErrCIDRInUse naming %s", err, m.cfg.BridgeName)
	}
	if _, err := netlink.LinkByName(cfg.BridgeName); err == nil {
		t.Errorf("the refused node's bridge %q exists", cfg.BridgeName)
		_ = twin.RemoveBridge(testContext(t))
	}
}

// TestLocalPodCIDRs: another node sees this node's pod CIDR as taken on the
// machine; the node itself does not.
func TestLocalPodCIDRs(t *testing.T) {
	m := newNode(t, "")
	for _, tc := range []struct {
		node string
		want bool
	}{{"podflow-test-another-node", true}, {m.cfg.NodeName, false}} {
		got, err := LocalPodCIDRs(tc.node)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(got, m.subnet) != tc.want {
			t.Errorf("LocalPodCIDRs(%q) = %v, want %s in it: %v", tc.node, got, m.subnet, tc.want)
		}
	}
}

// Package containertest has helpers for tests that run containers: a
// busybox root filesystem, throwaway cgroups and network namespaces, each
// named podflow… or pf… and removed by t.Cleanup.
package containertest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Busybox is where Debian's busybox-static installs the binary.
const Busybox = "/usr/bin/busybox"

// RequireRoot skips the test unless it runs as root with busybox-static.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: containers use namespaces, mounts and cgroups")
	}
	if _, err := os.Stat(Busybox); err != nil {
		t.Skipf("needs %s (Debian package busybox-static; make deps-os installs it)", Busybox)
	}
}

// Rootfs makes a busybox root filesystem in dir (bin/busybox and a link per
// applet) and returns dir.
func Rootfs(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"etc", "tmp", "proc", "dev", "sys", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile(Busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), src, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(Busybox, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	for _, name := range strings.Fields(string(out)) {
		if name == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(bin, name)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("bin", filepath.Join(dir, "sbin")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Name returns prefix followed by random hex, at most 15 characters.
func Name(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	n := prefix + hex.EncodeToString(b)
	if len(n) > 15 {
		n = n[:15]
	}
	return n
}

// CgroupV1 makes a cgroup named "podflow-test-…" in each given v1
// hierarchy (e.g. "memory", "pids") and returns subsystem → directory. The
// cgroups are removed on cleanup (after their processes exited).
func CgroupV1(t testing.TB, subsystems ...string) map[string]string {
	t.Helper()
	name := "podflow-test-" + Name("")
	out := map[string]string{}
	for _, s := range subsystems {
		dir := filepath.Join("/sys/fs/cgroup", s, name)
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", s, "cgroup.procs")); err != nil {
			t.Skipf("needs the cgroup v1 %s hierarchy at /sys/fs/cgroup/%s", s, s)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeCgroup(t, dir) })
		out[s] = dir
	}
	return out
}

// CgroupV2 makes a cgroup "podflow-test-…" in the cgroup2 mount (the
// unified hierarchy of a hybrid layout, or /sys/fs/cgroup) and returns its
// directory, removed on cleanup.
func CgroupV2(t testing.TB) string {
	t.Helper()
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(root, "cgroup.subtree_control")); err != nil {
			continue
		}
		dir := filepath.Join(root, "podflow-test-"+Name(""))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeCgroup(t, dir) })
		return dir
	}
	t.Skip("needs a cgroup2 mount (/sys/fs/cgroup/unified or /sys/fs/cgroup)")
	return ""
}

func removeCgroup(t testing.TB, dir string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("remove cgroup %q: %v", dir, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Netns creates a network namespace "pf…" with `ip netns add` (lo up) and
// returns its path; it is deleted on cleanup.
func Netns(t testing.TB) string {
	t.Helper()
	name := Name("pfct")
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("needs ip netns (iproute2): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	return "/run/netns/" + name
}

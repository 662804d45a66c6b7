package linux_test

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/network"
)

// TestAgentsShareAHost starts a second agent of the same node name beside
// a live one (another data directory, as a second podflow on the machine)
// and on the same data directory under another name: both are refused
// with ErrNodeInUse and the live agent's pod keeps its sandbox. Then `ip
// netns add` by someone else runs while the pod exists, and Decommission
// still leaves nothing of the node on the machine, nor its lock file.
func TestAgentsShareAHost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	pd := newPod(e.cfg.NodeName, "coexist", "sleep", "3600")
	sb, err := e.rt.RunPodSandbox(ctx, pd)
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	netnsPath := filepath.Join(network.NetnsDir, e.rt.Network().NetnsName(pd.Metadata.Uid))

	for _, tc := range []struct {
		name   string
		adjust func(*linux.Config)
	}{
		{"same node, another data directory", func(c *linux.Config) {
			c.DataDir = t.TempDir()
			c.Network.DataDir = filepath.Join(c.DataDir, "network")
			c.Image.Dir = filepath.Join(c.DataDir, "images")
		}},
		{"another node, same data directory", func(c *linux.Config) {
			c.NodeName = c.NodeName + "-b"
			c.Network = network.DefaultConfig(c.NodeName, fmt.Sprintf("10.244.%d.0/24", 150+mrand.IntN(40)), c.Network.DataDir)
			c.Cgroups.Root = e.cgroups + "-b"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.cfg
			tc.adjust(&cfg)
			rt, err := linux.New(cfg)
			if err == nil {
				rt.Close()
				t.Fatal("a second agent started beside a live one")
			}
			if !errors.Is(err, linux.ErrNodeInUse) {
				t.Fatalf("linux.New = %v, want ErrNodeInUse", err)
			}
			t.Log(err)
			if sbs, _ := e.rt.ListSandboxes(ctx); len(sbs) != 1 || sbs[0].Sandbox != sb {
				t.Errorf("the live agent's sandboxes = %+v", sbs)
			}
			if st, err := os.Stat(netnsPath); err != nil || st.Mode().IsDir() {
				t.Errorf("the live pod's netns: %v", err)
			}
		})
	}

	other := "pftest-" + randHex(4)
	if out, err := exec.Command("ip", "netns", "add", other).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", other).Run() })
	if err := e.rt.Decommission(ctx); err != nil {
		t.Fatalf("Decommission after `ip netns add`: %v", err)
	}
	e.assertNoLeaks(pd.Metadata.Uid)
	if _, err := os.Stat(netnsPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns %s after Decommission: %v", netnsPath, err)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.LockDir, e.cfg.NodeName+".lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after Decommission: %v", err)
	}
	if out, err := exec.Command("ip", "netns", "delete", other).CombinedOutput(); err != nil {
		t.Fatalf("ip netns delete: %v\n%s", err, out)
	}
}

// TestOrphanedPodIsReapedCompletely: a running pod whose record is gone
// (its agent died and its data directory went away) can be adopted by no
// agent, so the next agent of the node kills its processes and removes
// its cgroups, namespace, veth and address.
func TestOrphanedPodIsReapedCompletely(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	pd := newPod(e.cfg.NodeName, "orphan", "sleep", "3600")
	sb, err := e.rt.RunPodSandbox(ctx, pd)
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	if _, err := e.rt.PullImage(ctx, pd, busyboxImage, "IfNotPresent"); err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	if _, err := e.rt.StartContainer(ctx, pd, pd.Spec.Containers[0], sb); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	if err := e.rt.Close(); err != nil { // the agent stops; the pod runs on
		t.Fatal(err)
	}
	e.rt = nil
	// Its record goes away (moved aside, removed at the end).
	aside := filepath.Join(t.TempDir(), "pod")
	if err := os.Rename(filepath.Join(e.cfg.DataDir, "pods", pd.Metadata.Uid), aside); err != nil {
		t.Fatal(err)
	}
	procs, _ := filepath.Glob("/sys/fs/cgroup/*/" + e.cgroups + "/*/pod" + pd.Metadata.Uid + "/*/cgroup.procs")
	if len(procs) == 0 || readFile(procs[0]) == "" {
		t.Fatalf("no process in the pod's cgroup before the restart: %v", procs)
	}
	e.rt = e.open()
	if sbs, _ := e.rt.ListSandboxes(ctx); len(sbs) != 0 {
		t.Errorf("sandboxes after the restart: %+v", sbs)
	}
	e.assertNoLeaks(pd.Metadata.Uid)
	if _, err := os.Stat(filepath.Join(network.NetnsDir, e.rt.Network().NetnsName(pd.Metadata.Uid))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the orphan's netns: %v", err)
	}
	if _, err := net.InterfaceByName(e.rt.Network().HostVethName(pd.Metadata.Uid)); err == nil {
		t.Errorf("the orphan's veth %s remains", e.rt.Network().HostVethName(pd.Metadata.Uid))
	}
}

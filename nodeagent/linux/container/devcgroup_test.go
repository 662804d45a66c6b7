package container_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/container/containertest"
)

const devicesV1 = "/sys/fs/cgroup/devices"

// deviceCgroup returns where the shim puts spec's cgroup v1 device cgroup,
// skipping the test on a host without that hierarchy. Cleanup kills what is
// left in it and removes it, so a failing test leaves nothing behind.
func deviceCgroup(t *testing.T, spec container.Spec) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(devicesV1, "devices.allow")); err != nil {
		t.Skip("no cgroup v1 devices hierarchy:", err)
	}
	dir := filepath.Join(devicesV1, "podflow-dev-"+spec.ID)
	t.Cleanup(func() {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		for range 100 { // the killed processes leave the cgroup
			if container.RemoveDeviceCgroup(spec.ID) == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return dir
}

func assertGone(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		t.Errorf("device cgroup %s still there (%v), holding %q", dir, err, procs)
	}
}

// TestDeviceCgroupRemovedWithLeftovers: a container whose init exits while
// a process it started is still in its device cgroup (its PID namespace,
// the pod's shared one or the host's, does not end with the init) has the
// cgroup removed by the time its exit is reported: the shim kills the
// leftover and removes the cgroup once the kernel has taken it out.
func TestDeviceCgroupRemovedWithLeftovers(t *testing.T) {
	containertest.RequireRoot(t)
	for _, tc := range []struct {
		name   string
		shared bool // the pod's PID namespace, else the host's
	}{{"shared PID namespace", true}, {"host PID namespace", false}} {
		t.Run(tc.name, func(t *testing.T) {
			spec := newSpec(t, "sh", "-c", "sleep 1000 & echo started")
			dir := deviceCgroup(t, spec)
			if tc.shared {
				ns, err := container.StartPIDNamespace(ctx20(t), container.DefaultConfig(), t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ns.Kill(ctx20(t)) })
				spec.PIDNamespace = &ns
			} else {
				spec.HostPID = true
			}
			c := start(t, spec)
			st, err := c.Wait(ctx20(t))
			if err != nil || st.ExitCode != 0 {
				t.Fatalf("state %+v, %v\n%s", st, err, logText(t, spec.LogPath))
			}
			assertGone(t, dir)
		})
	}
}

// TestAbandonedStartRemovesDeviceCgroup: a Start whose ctx ends after the
// shim made the device cgroup but before it reported kills the shim, which
// then cannot remove the cgroup; Start does.
func TestAbandonedStartRemovesDeviceCgroup(t *testing.T) {
	containertest.RequireRoot(t)
	for i := range 3 {
		spec := newSpec(t, "sh", "-c", "exit 0")
		dir := deviceCgroup(t, spec)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // cancel as soon as the shim has made the cgroup
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := os.Stat(dir); err == nil {
					cancel()
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		c, err := container.Start(ctx, container.DefaultConfig(), spec)
		cancel()
		wg.Wait()
		if err == nil { // the shim reported first: it removes the cgroup on exit
			if _, err := c.Wait(ctx20(t)); err != nil {
				t.Fatal(err)
			}
			c.Close()
		} else if !errors.Is(err, context.Canceled) {
			t.Fatalf("Start %d: %v", i, err)
		}
		assertGone(t, dir)
	}
}

package container_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/container/containertest"
)

func TestMain(m *testing.M) {
	if container.RunHelper() {
		return
	}
	goleak.VerifyTestMain(m)
}

func ctx20(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newSpec returns a spec over a fresh busybox rootfs.
func newSpec(t *testing.T, args ...string) container.Spec {
	containertest.RequireRoot(t)
	dir := t.TempDir()
	return container.Spec{
		ID:       containertest.Name("c"),
		Dir:      filepath.Join(dir, "state"),
		Rootfs:   containertest.Rootfs(t, filepath.Join(dir, "rootfs")),
		LogPath:  filepath.Join(dir, "0.log"),
		Hostname: "web-0",
		Args:     args,
		Env:      []string{"PATH=/bin", "GREETING=hello"},
	}
}

func start(t *testing.T, spec container.Spec) *container.Container {
	t.Helper()
	c, err := container.Start(ctx20(t), container.DefaultConfig(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := c.Stop(ctx, 0); err != nil && !errors.Is(err, container.ErrClosed) {
			t.Errorf("Stop: %v", err)
		}
		c.Close()
	})
	return c
}

func logText(t *testing.T, path string) string {
	t.Helper()
	var b bytes.Buffer
	if err := container.CopyLog(context.Background(), &b, path, false, nil); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestRunRecordsExitAndLogs(t *testing.T) {
	spec := newSpec(t, "sh", "-c", `echo "$GREETING from pid $$ on $(hostname)"; echo oops >&2; ls /dev; exit 3`)
	c := start(t, spec)
	st, err := c.Wait(ctx20(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != container.StatusExited || st.ExitCode != 3 || st.Signal != 0 {
		t.Fatalf("state = %+v, want exited with code 3", st)
	}
	out := logText(t, spec.LogPath)
	for _, want := range []string{"hello from pid 1 on web-0\n", "oops\n", "null\n", "urandom\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	raw, _ := os.ReadFile(spec.LogPath)
	if !bytes.Contains(raw, []byte(" stderr F oops\n")) {
		t.Errorf("log is not in CRI format:\n%s", raw)
	}
	if disk, _ := container.ReadState(spec.Dir); disk.ExitCode != 3 {
		t.Errorf("state file = %+v", disk)
	}
}

func TestStartFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		wd   string
	}{
		{"missing binary", []string{"no-such-command"}, ""},
		{"not executable", []string{"/etc"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := newSpec(t, tc.args...)
			spec.WorkingDir = tc.wd
			_, err := container.Start(ctx20(t), container.DefaultConfig(), spec)
			if !errors.Is(err, container.ErrExec) {
				t.Fatalf("Start = %v, want ErrExec", err)
			}
			st, _ := container.ReadState(spec.Dir)
			if st.Status != container.StatusExited || st.Error == "" {
				t.Fatalf("state = %+v, want exited with an error", st)
			}
		})
	}
}

func TestStop(t *testing.T) {
	t.Run("SIGKILL after grace when init ignores SIGTERM", func(t *testing.T) {
		c := start(t, newSpec(t, "sleep", "1000"))
		begin := time.Now()
		st, err := c.Stop(ctx20(t), 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if st.Signal != int(unix.SIGKILL) || st.ExitCode != 137 {
			t.Fatalf("state = %+v, want SIGKILL", st)
		}
		if d := time.Since(begin); d < 300*time.Millisecond {
			t.Fatalf("killed after %s, before the grace period", d)
		}
	})
	t.Run("SIGTERM handled", func(t *testing.T) {
		spec := newSpec(t, "sh", "-c", `trap 'echo bye; exit 0' TERM; echo up; while true; do sleep 0.05; done`)
		c := start(t, spec)
		waitLog(t, spec.LogPath, "up")
		st, err := c.Stop(ctx20(t), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if st.ExitCode != 0 || st.Signal != 0 {
			t.Fatalf("state = %+v, want a clean exit", st)
		}
		if out := logText(t, spec.LogPath); !strings.Contains(out, "bye") {
			t.Errorf("log = %q", out)
		}
	})
}

func waitLog(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if bytes.Contains(b, []byte(want)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log %s never showed %q: %s", path, want, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An agent that restarts finds the container with Open: it still runs, and
// the new handle learns of its exit without being the shim's parent.
func TestOpenAfterHandleClosed(t *testing.T) {
	spec := newSpec(t, "sh", "-c", `echo started; read x < /dev/zero; sleep 1000`)
	c := start(t, spec)
	first := c.State()
	c.Close()

	c2, err := container.Open(spec.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if st := c2.State(); st.Status != container.StatusRunning || st.PID != first.PID {
		t.Fatalf("reopened state = %+v, want running pid %d", st, first.PID)
	}
	if err := c2.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, err := c2.Wait(ctx20(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Signal != 9 {
		t.Fatalf("state = %+v", st)
	}
	if err := c2.Signal(unix.SIGTERM); !errors.Is(err, container.ErrNotRunning) {
		t.Fatalf("Signal after exit = %v, want ErrNotRunning", err)
	}
}

func TestExec(t *testing.T) {
	c := start(t, newSpec(t, "sleep", "1000"))
	ctx := ctx20(t)
	env := []string{"PATH=/bin"}
	res, err := c.Exec(ctx, []string{"sh", "-c", "hostname; cat /proc/1/cmdline | tr '\\0' ' '; echo; pwd"}, env, "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || string(res.Output) != "web-0\nsleep 1000 \n/tmp\n" {
		t.Fatalf("exec = %d %q", res.ExitCode, res.Output)
	}
	if res, err := c.Exec(ctx, []string{"sh", "-c", "exit 7"}, env, ""); err != nil || res.ExitCode != 7 {
		t.Fatalf("exit 7: %+v %v", res, err)
	}
	if res, err := c.Exec(ctx, []string{"nope"}, env, ""); err != nil || res.ExitCode != 127 {
		t.Fatalf("missing command: %+v %v", res, err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Exec(short, []string{"sleep", "100"}, env, ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout: %v", err)
	}
}

func TestVolumesAndNetns(t *testing.T) {
	spec := newSpec(t, "sh", "-c", `cat /data/in; echo out > /data/out; (echo x > /cfg/key) 2>/dev/null && echo WRITABLE; cat /cfg/key; cat /proc/net/dev | tail -n +3 | cut -d: -f1`)
	data, cfg := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "in"), []byte("from host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg, "key"), []byte("value\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec.Mounts = []container.Mount{{Source: data, Destination: "/data"}, {Source: cfg, Destination: "/etc/../cfg", ReadOnly: true}}
	spec.NetnsPath = containertest.Netns(t)
	c := start(t, spec)
	st, err := c.Wait(ctx20(t))
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("wait: %+v %v\n%s", st, err, logText(t, spec.LogPath))
	}
	out := logText(t, spec.LogPath)
	if out != "from host\nvalue\n    lo\n" {
		t.Fatalf("output = %q", out)
	}
	if b, _ := os.ReadFile(filepath.Join(data, "out")); string(b) != "out\n" {
		t.Fatalf("write through the volume: %q", b)
	}
}

func TestCgroupPlacement(t *testing.T) {
	t.Run("v1", func(t *testing.T) {
		spec := newSpec(t, "cat", "/proc/self/cgroup")
		spec.Cgroups = containertest.CgroupV1(t, "memory", "pids")
		c := start(t, spec)
		if _, err := c.Wait(ctx20(t)); err != nil {
			t.Fatal(err)
		}
		out := logText(t, spec.LogPath)
		for sub, dir := range spec.Cgroups {
			if want := sub + ":/" + filepath.Base(dir); !strings.Contains(out, want) {
				t.Errorf("container cgroups lack %q:\n%s", want, out)
			}
		}
	})
	t.Run("v2", func(t *testing.T) {
		spec := newSpec(t, "cat", "/proc/self/cgroup")
		spec.Cgroups = map[string]string{"": containertest.CgroupV2(t)}
		c := start(t, spec)
		if _, err := c.Wait(ctx20(t)); err != nil {
			t.Fatal(err)
		}
		if out, want := logText(t, spec.LogPath), "0::/"+filepath.Base(spec.Cgroups[""]); !strings.Contains(out, want) {
			t.Errorf("container cgroups lack %q:\n%s", want, out)
		}
	})
}

func TestOOMKilled(t *testing.T) {
	spec := newSpec(t, "sh", "-c", `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived`)
	spec.Cgroups = containertest.CgroupV1(t, "memory")
	limit := 16 << 20
	if err := os.WriteFile(filepath.Join(spec.Cgroups["memory"], "memory.limit_in_bytes"), []byte(strconv.Itoa(limit)), 0); err != nil {
		t.Fatal(err)
	}
	c := start(t, spec)
	st, err := c.Wait(ctx20(t))
	if err != nil {
		t.Fatal(err)
	}
	if !st.OOMKilled || st.Signal != 9 {
		t.Fatalf("state = %+v, want OOMKilled", st)
	}
}

// BenchmarkStart measures a container's start to exit (`true`) with each
// cgroup placement: v2 clones straight into the cgroup, v1 makes the init
// wait on a pipe until the shim has written its pid.
func BenchmarkStart(b *testing.B) {
	for _, mode := range []string{"v2-clone-into-cgroup", "v1-init-waits"} {
		b.Run(mode, func(b *testing.B) {
			containertest.RequireRoot(b)
			dir := b.TempDir()
			rootfs := containertest.Rootfs(b, filepath.Join(dir, "rootfs"))
			var cgroups map[string]string
			if mode == "v1-init-waits" {
				cgroups = containertest.CgroupV1(b, "memory", "pids", "cpu")
			} else {
				cgroups = map[string]string{"": containertest.CgroupV2(b)}
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				spec := container.Spec{ID: "b" + strconv.Itoa(i), Dir: filepath.Join(dir, strconv.Itoa(i)), Rootfs: rootfs,
					LogPath: filepath.Join(dir, strconv.Itoa(i)+".log"), Args: []string{"true"}, Env: []string{"PATH=/bin"}, Cgroups: cgroups}
				c, err := container.Start(ctx, container.DefaultConfig(), spec)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// With Image, the rootfs is an overlay: the container writes to its own
// layer and the shared image stays untouched.
func TestOverlayKeepsImageReadOnly(t *testing.T) {
	spec := newSpec(t, "sh", "-c", `echo changed > /bin/new && rm /bin/cat && ls /bin/new`)
	spec.Image, spec.Rootfs = spec.Rootfs, filepath.Join(filepath.Dir(spec.Rootfs), "mnt")
	c := start(t, spec)
	st, err := c.Wait(ctx20(t))
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("wait: %+v %v\n%s", st, err, logText(t, spec.LogPath))
	}
	if _, err := os.Stat(filepath.Join(spec.Image, "bin", "cat")); err != nil {
		t.Errorf("the image lost /bin/cat: %v", err)
	}
	if _, err := os.Stat(filepath.Join(spec.Image, "bin", "new")); err == nil {
		t.Error("the image gained /bin/new")
	}
	if b, _ := os.ReadFile(filepath.Join(spec.Dir, "upper", "bin", "new")); string(b) != "changed\n" {
		t.Errorf("upper layer: %q", b)
	}
}

func TestSpares(t *testing.T) {
	containertest.RequireRoot(t)
	sp, err := container.NewSpares(container.DefaultConfig(), 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		spec := newSpec(t, "sh", "-c", "echo run "+strconv.Itoa(i))
		c, err := sp.Start(ctx20(t), spec)
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(ctx20(t))
		c.Close()
		if err != nil || st.ExitCode != 0 {
			t.Fatalf("wait: %+v %v", st, err)
		}
		if out := logText(t, spec.LogPath); out != "run "+strconv.Itoa(i)+"\n" {
			t.Fatalf("log = %q", out)
		}
	}
	sp.Close()
	sp.Close()
}

// TestLogRotatedAtMaxSize: a container writing more than LogMaxSize leaves
// at most LogMaxFiles files, none larger than LogMaxSize.
func TestLogRotatedAtMaxSize(t *testing.T) {
	spec := newSpec(t, "sh", "-c", `i=0; while [ $i -lt 4000 ]; do echo "line $i of a container that writes more than its log may hold"; i=$((i+1)); done`)
	spec.LogMaxSize, spec.LogMaxFiles = container.MinLogMaxSize, 3
	c := start(t, spec)
	if st, err := c.Wait(ctx20(t)); err != nil || st.ExitCode != 0 {
		t.Fatalf("wait: %+v %v", st, err)
	}
	rotated, err := container.RotatedLogs(spec.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	files := append(rotated, spec.LogPath)
	if len(rotated) == 0 || len(files) > spec.LogMaxFiles {
		t.Fatalf("log files %v, want rotated ones and at most %d", files, spec.LogMaxFiles)
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.Size() > spec.LogMaxSize {
			t.Errorf("%s: %v, want at most %d bytes", f, err, spec.LogMaxSize)
		}
	}
	if out := logText(t, spec.LogPath); !strings.Contains(out, "line 3999 of") {
		t.Errorf("the current file lacks the last line:\n%.200s", out)
	}
}

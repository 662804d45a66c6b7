package container_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/container/containertest"
)

// TestSharedPIDNamespace: containers joining one holder's PID namespace
// (shareProcessNamespace) see each other's processes, PID 1 being the
// holder, which they can neither kill nor enter; without it they see only
// their own. Killing the holder ends every process of the namespace.
func TestSharedPIDNamespace(t *testing.T) {
	containertest.RequireRoot(t)
	const script = `ps -o pid,args; echo "root:"; ls /proc/1/root/ 2>&1; kill -9 1; echo "kill:$?"; sleep 0.2; ls -d /proc/1 >/dev/null && echo holder-alive`
	for _, shared := range []bool{true, false} {
		t.Run(map[bool]string{true: "shared", false: "own"}[shared], func(t *testing.T) {
			var ns *container.PIDNamespace
			if shared {
				n, err := container.StartPIDNamespace(ctx20(t), container.DefaultConfig(), t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = n.Kill(ctx20(t)) })
				ns = &n
			}
			a := newSpec(t, "sleep", "30")
			a.PIDNamespace = ns
			ca := start(t, a)
			b := newSpec(t, "sh", "-c", script)
			b.PIDNamespace = ns
			cb := start(t, b)
			if st, err := cb.Wait(ctx20(t)); err != nil || st.ExitCode != 0 {
				t.Fatalf("b = %+v, %v\n%s", st, err, logText(t, b.LogPath))
			}
			out := logText(t, b.LogPath)
			if got := strings.Contains(out, "sleep 30"); got != shared {
				t.Errorf("b sees a's sleep: %v, want %v:\n%s", got, shared, out)
			}
			if !shared {
				return
			}
			if !regexp.MustCompile(`(?m)^\s*1 .*podflow-pidns$`).MatchString(out) {
				t.Errorf("PID 1 is not the holder:\n%s", out)
			}
			for _, want := range []string{"/proc/1/root/: Permission denied", "holder-alive"} {
				if !strings.Contains(out, want) {
					t.Errorf("log lacks %q:\n%s", want, out)
				}
			}
			if !ns.Alive() {
				t.Fatal("holder gone after a container's exit")
			}
			// A container's init that exits leaves nothing behind, as runc
			// kills the rest of a container without a PID namespace of its own.
			c := newSpec(t, "sh", "-c", "sleep 77 & echo started")
			c.PIDNamespace = ns
			c.Cgroups = map[string]string{"": containertest.CgroupV2(t)}
			cc := start(t, c)
			if st, err := cc.Wait(ctx20(t)); err != nil || st.ExitCode != 0 {
				t.Fatalf("c = %+v, %v\n%s", st, err, logText(t, c.LogPath))
			}
			if procs, err := os.ReadFile(filepath.Join(c.Cgroups[""], "cgroup.procs")); err != nil || len(procs) != 0 {
				t.Errorf("c's cgroup holds %q (%v) after its init exited", procs, err)
			}
			if err := ns.Kill(ctx20(t)); err != nil {
				t.Fatal(err)
			}
			if ns.Alive() {
				t.Error("holder alive after Kill")
			}
			st, err := ca.Wait(ctx20(t))
			if err != nil || st.Signal != 9 {
				t.Errorf("a after the holder's kill = %+v, %v; want SIGKILL", st, err)
			}
			if err := ns.Kill(ctx20(t)); err != nil {
				t.Errorf("second Kill: %v", err)
			}
		})
	}
}

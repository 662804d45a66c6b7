package linux_test

import (
	"os"
	"strings"
	"testing"
	"time"
)

// hostNetwork, hostPID and hostIPC put the container in the host's
// namespaces; without them it sees none of the host's.
func TestHostNamespaces(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	hostInit := strings.ReplaceAll(readFile("/proc/1/cmdline"), "\x00", " ")
	hostIPC, _ := os.Readlink("/proc/self/ns/ipc")
	hostUTS, _ := os.Readlink("/proc/self/ns/uts")
	script := `tr '\0' ' ' < /proc/1/cmdline; echo; cat /proc/net/dev; readlink /proc/self/ns/ipc; readlink /proc/self/ns/uts`
	for _, tc := range []struct {
		name string
		host bool
	}{{"host namespaces", true}, {"pod namespaces", false}} {
		t.Run(tc.name, func(t *testing.T) {
			pd := newPod(e.cfg.NodeName, "hostns", "sleep", "3600")
			pd.Spec.HostNetwork, pd.Spec.HostPid, pd.Spec.HostIpc = tc.host, tc.host, tc.host
			sb, id := e.startPod(t, ctx, pd)
			defer func() {
				if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
					t.Error(err)
				}
			}()
			if got := sb.IP == e.cfg.NodeIP; got != tc.host {
				t.Errorf("pod IP %s, node IP %s", sb.IP, e.cfg.NodeIP)
			}
			out := e.execProbe(t, ctx, pd, id, "sh", "-c", script)
			for what, want := range map[string]string{"host PID 1's cmdline": hostInit, "the bridge": e.cfg.Network.BridgeName + ":",
				"the host's IPC namespace": hostIPC, "the host's UTS namespace": hostUTS} {
				if got := strings.Contains(out, want); got != tc.host {
					t.Errorf("sees %s (%q) = %v, want %v:\n%s", what, want, got, tc.host, out)
				}
			}
		})
	}
}

package linux_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
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
			c := pd.Spec.Containers[0]
			if _, err := e.rt.PullImage(ctx, pd, busyboxImage, "IfNotPresent"); err != nil {
				t.Fatal(err)
			}
			sb, err := e.rt.RunPodSandbox(ctx, pd)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
					t.Error(err)
				}
			}()
			if got := sb.IP == e.cfg.NodeIP; got != tc.host {
				t.Errorf("pod IP %s, node IP %s", sb.IP, e.cfg.NodeIP)
			}
			id, err := e.rt.StartContainer(ctx, pd, c, sb)
			if err != nil {
				t.Fatal(err)
			}
			res, err := e.rt.Probe(ctx, pd, c, id, nodeagent.ProbeLiveness, &corev1.Probe{
				Exec: &corev1.ExecAction{Command: []string{"sh", "-c", script}}})
			if err != nil || !res.OK {
				t.Fatalf("probe: %+v %v", res, err)
			}
			for what, want := range map[string]string{"host PID 1's cmdline": hostInit, "the bridge": e.cfg.Network.BridgeName + ":",
				"the host's IPC namespace": hostIPC, "the host's UTS namespace": hostUTS} {
				if got := strings.Contains(res.Message, want); got != tc.host {
					t.Errorf("sees %s (%q) = %v, want %v:\n%s", what, want, got, tc.host, res.Message)
				}
			}
		})
	}
}

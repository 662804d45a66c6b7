package linux_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// hostNetwork, hostPID and hostIPC put the container in the host's
// namespaces; without them it sees none of the host's.
func TestHostNamespaces(t *testing.T) {
	t.Parallel()
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

// shareProcessNamespace: the pod's containers see each other's processes,
// PID 1 being the pod's holder; without it each sees only its own. The
// holder lives in the pod's cgroup, so a pod whose cgroups are gone after
// RemovePodSandbox has no holder left.
func TestShareProcessNamespace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	for _, shared := range []bool{true, false} {
		t.Run(map[bool]string{true: "shared", false: "own"}[shared], func(t *testing.T) {
			pd := newPod(e.cfg.NodeName, "pidns", "sleep", "3600")
			pd.Spec.ShareProcessNamespace = &shared
			pd.Spec.Containers = append(pd.Spec.Containers, &corev1.Container{
				Name: "side", Image: busyboxImage, ImagePullPolicy: "IfNotPresent", Command: []string{"sleep", "1234"}})
			sb, id := e.startPod(t, ctx, pd)
			if _, err := e.rt.StartContainer(ctx, pd, pd.Spec.Containers[1], sb); err != nil {
				t.Fatal(err)
			}
			out := e.execProbe(t, ctx, pd, id, "ps", "-o", "pid,args")
			if got := strings.Contains(out, "sleep 1234"); got != shared {
				t.Errorf("main sees side's process: %v, want %v:\n%s", got, shared, out)
			}
			if got := regexp.MustCompile(`(?m)^\s*1 .*podflow-pidns$`).MatchString(out); got != shared {
				t.Errorf("PID 1 is the pod's holder: %v, want %v:\n%s", got, shared, out)
			}
			if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
				t.Fatal(err)
			}
			e.assertNoLeaks(pd.Metadata.Uid)
		})
	}
}

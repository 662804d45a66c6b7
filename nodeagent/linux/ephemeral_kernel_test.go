package linux_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// An ephemeral container (kubectl debug --target) runs in the pod's
// network namespace and, with a target, in the target's PID namespace:
// it sees the target's processes (PID 1 is the target's init) and the
// target sees its; without a target it has a PID namespace of its own.
// A target that has exited is refused.
func TestEphemeralContainerTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	for _, targeted := range []bool{true, false} {
		t.Run(map[bool]string{true: "target", false: "no target"}[targeted], func(t *testing.T) {
			pd := newPod(e.cfg.NodeName, "debugged", "sleep", "3600")
			sb, id := e.startPod(t, ctx, pd)
			defer func() {
				if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
					t.Error(err)
				}
				e.assertNoLeaks(pd.Metadata.Uid)
			}()
			dbg := &corev1.Container{Name: "debugger", Image: busyboxImage, ImagePullPolicy: "IfNotPresent",
				Command: []string{"sleep", "4321"}, Stdin: true, Tty: true}
			var target nodeagent.ContainerID
			if targeted {
				target = id
			}
			did, err := e.rt.StartEphemeralContainer(ctx, pd, dbg, sb, target)
			if err != nil {
				t.Fatalf("StartEphemeralContainer: %v", err)
			}
			// A command that reads what the debugger sees, not a probe
			// under test: the time it needs on a loaded machine (as
			// execProbe gives), not the default one second.
			res, err := e.rt.Probe(ctx, pd, dbg, did, nodeagent.ProbeLiveness, &corev1.Probe{
				Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "ps -o pid,args; cat /proc/net/dev"}}, TimeoutSeconds: 30})
			if err != nil || !res.OK {
				t.Fatalf("exec in the ephemeral container: %+v %v", res, err)
			}
			out := res.Message
			if got := regexp.MustCompile(`(?m)^\s*1 sleep 3600$`).MatchString(out); got != targeted {
				t.Errorf("the debugger sees the target's init as PID 1: %v, want %v:\n%s", got, targeted, out)
			}
			if !strings.Contains(out, "eth0:") {
				t.Errorf("the debugger is not in the pod's network namespace (no eth0):\n%s", out)
			}
			if got := strings.Contains(e.execProbe(t, ctx, pd, id, "ps", "-o", "args"), "sleep 4321"); got != targeted {
				t.Errorf("the target sees the debugger's process: %v, want %v", got, targeted)
			}
		})
	}
	t.Run("target exited", func(t *testing.T) {
		pd := newPod(e.cfg.NodeName, "gone", "true")
		sb, id := e.startPod(t, ctx, pd)
		defer func() {
			if err := e.rt.RemovePodSandbox(ctx, pd.Metadata.Uid); err != nil {
				t.Error(err)
			}
			e.assertNoLeaks(pd.Metadata.Uid)
		}()
		select {
		case <-e.rt.ContainerExits(pd.Metadata.Uid):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		dbg := &corev1.Container{Name: "debugger", Image: busyboxImage, ImagePullPolicy: "IfNotPresent", Command: []string{"sleep", "1"}}
		_, err := e.rt.StartEphemeralContainer(ctx, pd, dbg, sb, id)
		if nodeagent.CodeOf(err, "") != nodeagent.CodeCreateContainer {
			t.Errorf("start with an exited target: %v, want a CreateContainerError", err)
		}
	})
}

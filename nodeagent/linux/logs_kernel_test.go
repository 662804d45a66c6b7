package linux_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// readAll reads a container's whole log through the agent, as the node
// serves kubectl logs, and returns its text (the CRI records' messages).
func readAll(a *nodeagent.Agent, req nodeagent.LogRequest) (string, error) {
	var b strings.Builder
	for {
		c, err := a.ReadLog(req, 64<<10)
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(c.Data), "\n") {
			if f := strings.SplitN(line, " ", 4); len(f) == 4 {
				b.WriteString(f[3] + "\n")
			}
		}
		if len(c.Data) == 0 {
			return b.String(), nil
		}
		req.Offset, req.File = c.Offset, c.File
	}
}

// waitPhase waits until the agent reports the pod in phase.
func waitPhase(t *testing.T, a *nodeagent.Agent, uid, phase string) *corev1.PodStatus {
	t.Helper()
	var st *corev1.PodStatus
	eventually(t, "pod "+phase, func() (bool, string) {
		st, _ = a.PodStatus(uid)
		return st.GetPhase() == phase, st.String()
	})
	return st
}

// TestLogsOfFinishedPod: a pod that has Succeeded has its sandbox
// released at once (no network namespace, no cgroup left, as kubelet frees
// a finished pod's), yet its container's log is served until the pod is
// deleted, as kubelet keeps exited containers; deleting removes it.
func TestLogsOfFinishedPod(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, store, _ := runAgent(t, e)
	pd := newPod(e.cfg.NodeName, "done", "sh", "-c", "echo one; echo two")
	pd.Spec.RestartPolicy = "Never"
	store.PutPod(pd)
	ctx := ctxT(t, 30*time.Second)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	uid := pd.Metadata.Uid
	waitPhase(t, a, uid, "Succeeded")
	eventually(t, "the sandbox released", func() (bool, string) {
		sbs, _ := e.rt.ListSandboxes(ctx)
		return len(sbs) == 1 && sbs[0].Released, ""
	})
	e.assertNoLeaks(uid) // network namespace, cgroups, mounts: gone
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), uid) {
		t.Fatalf("netns of the finished pod remains: %s", out)
	}
	for _, name := range []string{"main", ""} { // by name, and the only container
		got, err := readAll(a, nodeagent.LogRequest{Namespace: "default", Pod: "done", Container: name})
		if err != nil || got != "one\ntwo\n" {
			t.Fatalf("log of the Succeeded pod (container %q): %q, %v", name, got, err)
		}
	}
	_, err := a.ReadLog(nodeagent.LogRequest{Namespace: "default", Pod: "done", Container: "main", Previous: true}, 1024)
	if !errors.Is(err, nodeagent.ErrBadRequest) || !strings.Contains(err.Error(), `previous terminated container "main" in pod "done" not found`) {
		t.Fatalf("--previous of a container that ran once: %v", err)
	}

	// After an agent restart the finished pod (Succeeded in the store) has
	// no worker: its log is still served.
	a.Stop()
	pd.Status = &corev1.PodStatus{Phase: "Succeeded"}
	store.PutPod(pd)
	a2, _, _ := runAgentWith(t, e, store)
	if got, err := readAll(a2, nodeagent.LogRequest{Namespace: "default", Pod: "done", Container: "main"}); err != nil || got != "one\ntwo\n" {
		t.Fatalf("log after an agent restart: %q, %v", got, err)
	}
	if err := a2.HandlePodDelete(ctx, pd, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod removed", func() (bool, string) {
		_, err := os.Stat(filepath.Join(e.cfg.DataDir, "pods", uid))
		return os.IsNotExist(err), ""
	})
	if _, err := a2.ReadLog(nodeagent.LogRequest{Namespace: "default", Pod: "done", Container: "main"}, 1024); !errors.Is(err, nodeagent.ErrNoSuchObject) ||
		!strings.Contains(err.Error(), `pod "done" does not exist`) {
		t.Fatalf("log of a deleted pod: %v", err)
	}
}

// TestLogsPrevious: after a restart the current instance's log and, with
// previous, the one before are served (kubectl logs --previous); a third
// instance removes the first one's log (kubelet keeps one exited
// instance).
func TestLogsPrevious(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, store, _ := runAgent(t, e)
	pd := newPod(e.cfg.NodeName, "again", "sh", "-c",
		`n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/n; echo run $n; [ $n -ge 2 ] && exec sleep 1000; exit 1`)
	pd.Spec.RestartPolicy = "OnFailure"
	pd.Spec.TerminationGracePeriodSeconds = new(int64)
	pd.Spec.Volumes = []*corev1.Volume{{Name: "d", EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	pd.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "d", MountPath: "/d"}}
	store.PutPod(pd)
	ctx := ctxT(t, 30*time.Second)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	uid := pd.Metadata.Uid
	eventually(t, "the second instance running", func() (bool, string) {
		st, _ := a.PodStatus(uid)
		cs := st.GetContainerStatuses()
		return len(cs) == 1 && cs[0].GetRestartCount() == 1 && cs[0].GetState().GetRunning() != nil, st.String()
	})
	req := nodeagent.LogRequest{Namespace: "default", Pod: "again", Container: "main"}
	eventually(t, "the current log", func() (bool, string) {
		got, err := readAll(a, req)
		return err == nil && got == "run 2\n", got + errString(err)
	})
	req.Previous = true
	if got, err := readAll(a, req); err != nil || got != "run 1\n" {
		t.Fatalf("--previous: %q, %v", got, err)
	}
	if err := a.HandlePodDelete(ctx, pd, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod removed", func() (bool, string) {
		_, err := os.Stat(filepath.Join(e.cfg.DataDir, "pods", uid))
		return os.IsNotExist(err), ""
	})
}

// TestLogsOfWaitingContainer: a container that never started has no log;
// the node says why in kubelet's words.
func TestLogsOfWaitingContainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, store, _ := runAgent(t, e)
	pd := newPod(e.cfg.NodeName, "nopull", "true")
	pd.Spec.Containers[0].Image = "podflow/nosuchimage:1"
	store.PutPod(pd)
	ctx := ctxT(t, 30*time.Second)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a refusal that names the pull", func() (bool, string) {
		_, err := a.ReadLog(nodeagent.LogRequest{Namespace: "default", Pod: "nopull", Container: "main"}, 1024)
		return errors.Is(err, nodeagent.ErrBadRequest) && (strings.Contains(err.Error(), `container "main" in pod "nopull" is waiting to start: image can't be pulled`) ||
			strings.Contains(err.Error(), `container "main" in pod "nopull" is waiting to start: trying and failing to pull image`)), errString(err)
	})
	if _, err := a.ReadLog(nodeagent.LogRequest{Namespace: "default", Pod: "nopull", Container: "other"}, 1024); !errors.Is(err, nodeagent.ErrBadRequest) ||
		!strings.Contains(err.Error(), `container "other" in pod "nopull" is not available`) {
		t.Fatalf("a container the pod does not have: %v", err)
	}
	if _, err := a.ReadLog(nodeagent.LogRequest{Namespace: "default", Pod: "elsewhere", Container: "main"}, 1024); !errors.Is(err, nodeagent.ErrNoSuchObject) {
		t.Fatalf("a pod the node does not know: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

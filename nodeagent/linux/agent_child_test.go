package linux_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// envAgentChild names the file with a childSpec: the test binary then runs
// as a node agent process (agentChild) instead of running tests.
const envAgentChild = "PODFLOW_TEST_AGENT_CHILD"

type childSpec struct {
	Runtime linux.Config    `json:"runtime"`
	Pod     json.RawMessage `json:"pod"` // protojson
}

// linePublisher writes every envelope as one protojson line to w, a
// report's steps (eventsv1.Unfold) each on a line of its own.
type linePublisher struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *linePublisher) Publish(_ context.Context, env *eventsv1.Envelope) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range eventsv1.Unfold(env) {
		b, err := protojson.Marshal(e)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(p.w, "%s\n", b); err != nil {
			return err
		}
	}
	return nil
}

// agentChild runs the agent core over the Linux runtime with the pod of the
// child spec until it is killed.
func agentChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "agent child:", err)
		return 1
	}
	b, err := os.ReadFile(os.Getenv(envAgentChild))
	if err != nil {
		return fail(err)
	}
	var spec childSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fail(err)
	}
	pd := &corev1.Pod{}
	if err := protojson.Unmarshal(spec.Pod, pd); err != nil {
		return fail(err)
	}
	rt, err := linux.New(spec.Runtime)
	if err != nil {
		return fail(err)
	}
	store := nodeagenttest.NewStore()
	store.PutPod(pd)
	a, err := nodeagent.New(agentConfig(nodeagentCfg{spec.Runtime.NodeName, spec.Runtime.Network.PodCIDR}), rt, store, &linePublisher{w: os.Stdout})
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		return fail(err)
	}
	if err := a.HandlePodBound(ctx, pd); err != nil {
		return fail(err)
	}
	select {} // until SIGKILL
}

// agentProc is a node agent child process and the envelopes it published.
type agentProc struct {
	cmd  *exec.Cmd
	envs chan *eventsv1.Envelope
}

func startAgent(t *testing.T, specPath string) *agentProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envAgentChild+"="+specPath)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentProc{cmd: cmd, envs: make(chan *eventsv1.Envelope, 1024)}
	go func() { // ends at the child's exit (EOF)
		defer close(p.envs)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			env := &eventsv1.Envelope{}
			if protojson.Unmarshal(sc.Bytes(), env) == nil {
				p.envs <- env
			}
		}
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// kill SIGKILLs the agent (only it: its shims are in their own sessions).
func (p *agentProc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
		for range p.envs {
		}
	}
}

// await returns the first envelope that satisfies cond.
func (p *agentProc) await(t *testing.T, what string, cond func(*eventsv1.Envelope) bool) *eventsv1.Envelope {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case env, ok := <-p.envs:
			if !ok {
				t.Fatalf("agent exited before %s", what)
			}
			if cond(env) {
				return env
			}
		case <-timeout:
			t.Fatalf("no %s after 20s", what)
		}
	}
}

// SIGKILL the agent and start it again: the container keeps running (same
// process), the new agent adopts it with its restart count unchanged, and
// nothing is duplicated.
func TestAgentSIGKILLKeepsContainersRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_ = e.rt.Close() // the child processes own the node now; cleanup reopens it
	e.rt = nil
	// The container fails once, so its restart count is 1 when the agent
	// dies.
	pd := newPod(e.cfg.NodeName, "survivor", "sh", "-c", "[ -f /data/once ] || { touch /data/once; exit 1; }; exec sleep 3600")
	pd.Spec.Volumes = []*corev1.Volume{{Name: "data", EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	pd.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pj, err := protojson.Marshal(pd)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(childSpec{Runtime: e.cfg, Pod: pj})
	if err != nil {
		t.Fatal(err)
	}
	specPath := filepath.Join(t.TempDir(), "child.json")
	if err := os.WriteFile(specPath, b, 0o600); err != nil {
		t.Fatal(err)
	}

	first := startAgent(t, specPath)
	started := first.await(t, "the second ContainerStarted", func(env *eventsv1.Envelope) bool {
		return env.GetContainerStarted().GetRestartCount() == 1
	})
	id := started.GetContainerStarted().GetContainerId()
	dir := filepath.Join(e.cfg.DataDir, "pods", pd.Metadata.Uid, "containers", id)
	before, err := container.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	first.kill()

	after, err := container.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if after.Status != container.StatusRunning || !alive(before.PID) {
		t.Fatalf("after the agent's SIGKILL: state %+v, pid %d alive=%v", after, before.PID, alive(before.PID))
	}

	second := startAgent(t, specPath)
	report := second.await(t, "a status report of the adopted container", func(env *eventsv1.Envelope) bool {
		if env.GetContainerStarted() != nil {
			t.Fatalf("the restarted agent started the container again: %v", env)
		}
		for _, cs := range env.GetPodStatusReport().GetStatus().GetContainerStatuses() {
			if cs.GetState().GetRunning() != nil {
				return true
			}
		}
		return false
	})
	cs := report.GetPodStatusReport().GetStatus().GetContainerStatuses()[0]
	if cs.GetContainerId() != id || cs.GetRestartCount() != 1 {
		t.Fatalf("adopted container status = %v; want id %s, restartCount 1", cs, id)
	}
	now, _ := container.ReadState(dir)
	if now.PID != before.PID || now.PIDStart != before.PIDStart || !alive(before.PID) {
		t.Fatalf("container process changed: before %+v, now %+v", before, now)
	}
	second.kill()
}

func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

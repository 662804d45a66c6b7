package sim_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// echoPrograms runs, for a container named "sh", a program that echoes
// each line of its stdin and exits with the code of a line "exit N".
type echoPrograms struct{}

func (echoPrograms) Program(_ *corev1.Pod, c *corev1.Container, _ string, _ map[string]map[string][]byte) sim.Program {
	if c.GetName() != "sh" {
		return nil
	}
	return func(ctx context.Context, st sim.ProgramIO) int {
		if st.Stdin == nil {
			return 0
		}
		sc := bufio.NewScanner(st.Stdin)
		for sc.Scan() {
			var code int
			if _, err := fmt.Sscanf(sc.Text(), "exit %d", &code); err == nil {
				return code
			}
			fmt.Fprintln(st.Stdout, "echo:", sc.Text())
		}
		return 0
	}
}

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAttachToProgram: attach writes to a program's stdin, shows what it
// writes, and returns once it exits (its exit reaches ContainerExits);
// the log holds its output and nothing of the runtime's.
func TestAttachToProgram(t *testing.T) {
	cfg := sim.DefaultConfig("10.244.9.0/24")
	cfg.Programs = echoPrograms{}
	rt, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &corev1.Container{Name: "sh", Image: "busybox", Stdin: true, StdinOnce: true}
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "default", Uid: "u1"},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{c}}}
	sb, err := rt.RunPodSandbox(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	id, err := rt.StartContainer(ctx, pod, c, sb)
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuf
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- rt.Attach(ctx, "default", "p", "", "sh", sim.Stdio{Stdin: pr, Stdout: &out}) }()
	if _, err := io.WriteString(pw, "hello\nexit 4\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatalf("attach did not return after the program exited; output %q", out.String())
	}
	pw.Close()
	if out.String() != "echo: hello\n" {
		t.Errorf("attach showed %q", out.String())
	}
	select {
	case ex := <-rt.ContainerExits("u1"):
		if ex.ID != id || ex.ExitCode != 4 {
			t.Errorf("exit %+v, want code 4 of %s", ex, id)
		}
	case <-ctx.Done():
		t.Fatal("no exit reported")
	}
	ch, err := rt.ReadLog(nodeagent.LogRequest{Namespace: "default", Pod: "p"}, 1<<20)
	if err != nil || !strings.HasSuffix(string(ch.Data), " stdout F echo: hello\n") || strings.Count(string(ch.Data), "\n") != 1 || ch.Running {
		t.Errorf("log %q, running %v, %v", ch.Data, ch.Running, err)
	}
}

// TestSyntheticLogs: a container that runs no program logs how it
// started and ended; after a restart the previous instance's log stays
// readable, and a first read takes the last lines asked for.
func TestSyntheticLogs(t *testing.T) {
	rt, err := sim.New(sim.DefaultConfig("10.244.9.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx := context.Background()
	c := &corev1.Container{Name: "app", Image: "nginx", Args: []string{"-p", "80"}}
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "default", Uid: "u1", Annotations: map[string]string{sim.AnnotationLog: "a\nb\n"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{c}}}
	sb, err := rt.RunPodSandbox(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	id, err := rt.StartContainer(ctx, pod, c, sb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StopContainer(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	// FallbackToLogsOnError reads what it logged, not the runtime's lines.
	tail, err := rt.LogTail(ctx, "u1", id, 10, 100)
	if err != nil || string(tail) != "a\nb\n" {
		t.Errorf("LogTail = %q, %v", tail, err)
	}
	if _, err := rt.StartContainer(ctx, pod, c, sb); err != nil {
		t.Fatal(err)
	}
	prev, err := rt.ReadLog(nodeagent.LogRequest{Namespace: "default", Pod: "p", Previous: true}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	text := string(prev.Data)
	for _, want := range []string{`stdout F podflow-sim: container "app" started from image "nginx" running the image's entrypoint with args "-p 80"`,
		" stdout F a\n", " stdout F b\n", "stdout F podflow-sim: received SIGTERM: exited with code 143\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("previous log %q lacks %q", text, want)
		}
	}
	one := int64(1)
	cur, err := rt.ReadLog(nodeagent.LogRequest{Namespace: "default", Pod: "p", TailLines: &one}, 1<<20)
	if err != nil || !strings.HasSuffix(string(cur.Data), " stdout F b\n") || strings.Count(string(cur.Data), "\n") != 1 || !cur.Running {
		t.Errorf("tail 1 of the current log: %q running %v, %v", cur.Data, cur.Running, err)
	}
	if _, err := rt.ReadLog(nodeagent.LogRequest{Namespace: "default", Pod: "nope"}, 1<<20); err == nil {
		t.Error("the log of a pod not on the node was read")
	}
	var _ nodeagent.Runtime = rt
}

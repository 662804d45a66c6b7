package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// runIn is run with stdin ("": none).
func (k *kubectl) runIn(stdin string, args ...string) (string, string, int) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := k.cmd(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		k.t.Fatalf("kubectl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// testKubectlExec runs kubectl exec on a simulated pod, whose runtime
// answers through its built-in shell (echo, cat, false, …; testSimNode
// has attach).
func testKubectlExec(t *testing.T, k *kubectl, pod string) {
	for _, c := range []struct {
		name   string
		stdin  string
		args   []string
		stdout string
		stderr string
		code   int
	}{
		{name: "exec", args: []string{"exec", pod, "--", "echo", "hello", "world"}, stdout: "hello world\n"},
		{name: "exec with stdin", stdin: "piped\nlines\n", args: []string{"exec", "-i", pod, "--", "cat"}, stdout: "piped\nlines\n"},
		{name: "exit code", args: []string{"exec", pod, "--", "false"}, code: 1},
		{name: "not found", args: []string{"exec", pod, "--", "nope"}, stderr: "command not found", code: 127},
		// kubectl asks for no terminal when stdin is none: -t is then
		// ignored, with a warning.
		{name: "exec -it", stdin: "tty\n", args: []string{"exec", "-it", pod, "--", "cat"}, stdout: "tty\n", stderr: "Unable to use a TTY"},
		{name: "over SPDY", args: []string{"exec", pod, "--", "echo", "spdy"}, stdout: "spdy\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := k
			if c.name == "over SPDY" {
				// In kubectl's environment only: t.Setenv is refused in a
				// parallel test.
				spdy := *k
				spdy.env = append(slices.Clip(k.env), "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false")
				k = &spdy
			}
			out, errs, code := k.runIn(c.stdin, c.args...)
			if code != c.code || out != c.stdout || !strings.Contains(errs, c.stderr) {
				t.Fatalf("kubectl %s: exit %d (want %d)\nstdout %q (want %q)\nstderr %q (want %q in it)",
					strings.Join(c.args, " "), code, c.code, out, c.stdout, errs, c.stderr)
			}
		})
	}
}

// testKubectlPortForward runs kubectl port-forward to a simulated pod,
// whose ports echo, and sends two connections through it.
func testKubectlPortForward(t *testing.T, k *kubectl, pod string) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	cmd := k.cmd(ctx, "port-forward", "pod/"+pod, ":80")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() { cancel(); <-done }()
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 80`)
	var local string
	eventually(t, 20*time.Second, "kubectl port-forward to listen", func() (bool, string) {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			local = m[1]
		}
		return m != nil, out.String() + errb.String()
	})
	for _, msg := range []string{"GET / HTTP/1.0\r\n\r\n", strings.Repeat("echo ", 50000)} {
		c, err := net.Dial("tcp", "127.0.0.1:"+local)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(b) != msg {
			t.Fatalf("through port-forward: %.60q, %v (want %.60q)\n%s%s", b, err, msg, out.String(), errb.String())
		}
	}
}

// testKubectlExecPodGone: an exec session ends when its pod is deleted.
func testKubectlExecPodGone(t *testing.T, k *kubectl) {
	k.must("run", "exec-gone", "--image=nginx")
	eventually(t, 30*time.Second, "pod exec-gone to run", func() (bool, string) {
		out, _, _ := k.run("get", "pod", "exec-gone", "-o", "jsonpath={.status.phase}")
		return out == "Running", out
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stdin, keep, err := os.Pipe() // kept open: cat never sees its input end
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	defer stdin.Close()
	var out, errb syncBuffer
	cmd := k.cmd(ctx, "exec", "-i", "exec-gone", "--", "cat")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if _, err := io.WriteString(keep, "before\n"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "cat to echo", func() (bool, string) { return out.String() == "before\n", out.String() + errb.String() })
	k.must("delete", "pod", "exec-gone", "--grace-period=1", "--wait=false")
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("kubectl exec exited 0 when its pod went\n%s", errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl exec outlived its pod\n%s%s", out.String(), errb.String())
	}
}

// testKubectlCp copies a file into a simulated pod with kubectl cp (exec
// of tar) and back out, and compares the bytes; then a directory.
func testKubectlCp(t *testing.T, k *kubectl, pod string) {
	dir := t.TempDir()
	data := make([]byte, 300<<10) // several exec frames, every byte value
	for i := range data {
		data[i] = byte(i * 7)
	}
	in := filepath.Join(dir, "in.bin")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	k.must("cp", in, pod+":/tmp/copied.bin")
	out := filepath.Join(dir, "out.bin")
	k.must("cp", pod+":/tmp/copied.bin", out)
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("kubectl cp in and out: %d bytes, %v (want the %d sent)", len(got), err, len(data))
	}
	// Into an existing directory, the file keeps its name; a directory
	// copies recursively.
	k.must("exec", pod, "--", "test", "-d", "/tmp")
	k.must("cp", in, pod+":/tmp")
	src := filepath.Join(dir, "tree", "sub")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "f.txt"), []byte("in a tree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k.must("cp", filepath.Join(dir, "tree"), pod+":/tmp/tree")
	back := filepath.Join(dir, "back")
	k.must("cp", pod+":/tmp/tree", back)
	if got, err := os.ReadFile(filepath.Join(back, "sub", "f.txt")); err != nil || string(got) != "in a tree\n" {
		t.Fatalf("kubectl cp of a directory: %q, %v", got, err)
	}
	k.must("cp", pod+":/tmp/in.bin", filepath.Join(dir, "named.bin"))
	if got, err := os.ReadFile(filepath.Join(dir, "named.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("kubectl cp into a directory: %d bytes, %v", len(got), err)
	}
	// A missing file fails as with a real tar.
	if _, errs, code := k.run("cp", pod+":/tmp/nope", filepath.Join(dir, "nope")); code == 0 {
		t.Fatalf("kubectl cp of a missing file exited 0: %s", errs)
	}
}

// testKubectlTop runs kubectl top pods and nodes against metrics.k8s.io,
// read from the simulated nodes' usage model (1m and 4Mi a running
// container; a node's system share 50m and 512Mi over its containers').
func testKubectlTop(t *testing.T, k *kubectl, pod string) {
	out := k.must("top", "pods")
	if !regexpLine(out, "NAME", "CPU(cores)", "MEMORY(bytes)") || !regexpLine(out, pod, "1m", "4Mi") {
		t.Fatalf("kubectl top pods:\n%s", out)
	}
	if out := k.must("top", "pods", "-l", "app=nginx"); !regexpLine(out, pod, "1m", "4Mi") {
		t.Fatalf("kubectl top pods -l app=nginx:\n%s", out)
	}
	if out, errs, _ := k.run("top", "pods", "-l", "app=none"); strings.Contains(out, pod) {
		t.Fatalf("kubectl top pods -l app=none shows %s:\n%s%s", pod, out, errs)
	}
	out = k.must("top", "pod", pod, "--containers")
	if !regexp.MustCompile(`(?m)^` + pod + `\s+\S+\s+1m\s+4Mi\s*$`).MatchString(out) {
		t.Fatalf("kubectl top pod --containers:\n%s", out)
	}
	out = k.must("top", "nodes")
	if !regexpLine(out, "NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)") || !regexp.MustCompile(`(?m)^sim-node-\d+\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%\s*$`).MatchString(out) {
		t.Fatalf("kubectl top nodes:\n%s", out)
	}
	if _, errs, code := k.run("top", "pod", "no-such-pod"); code == 0 || !strings.Contains(errs, "not found") {
		t.Fatalf("kubectl top of a missing pod: exit %d %s", code, errs)
	}
}

package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/proto/corev1"
)

// TestLinuxKubectl drives the debugging commands of the stock kubectl
// against real containers (`podflow up --runtime linux`): exec (with
// stdin, with a terminal), cp both ways, port-forward to an HTTP server in
// the pod, attach to a container that keeps
// its stdin open, run -i/-it --rm with a piped script, whose exit code
// comes back and whose pod is deleted after, and debug -it --target with
// a piped script (an ephemeral container in the target's PID namespace).
func TestLinuxKubectl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces and mounts (CI runs as root)")
	}
	parallel(t, linuxRuntime)
	before := kernelObjects(t, "linux-node-1")
	c := startCluster(t, "--runtime", "linux")
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	c.mustPodflow("apply", "-f", writeTemp(t, `apiVersion: v1
kind: Pod
metadata: {name: shell}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: sh, image: podflow/busybox:1, command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 1; done"]}
`))
	c.waitPod("default", "shell", "Running", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Running" })

	t.Run("exec", func(t *testing.T) {
		for _, tc := range []struct {
			name, stdin    string
			args           []string
			stdout, stderr string
			code           int
		}{
			{name: "plain", args: []string{"exec", "shell", "--", "echo", "hello", "world"}, stdout: "hello world\n"},
			{name: "stdin", stdin: "piped\nlines\n", args: []string{"exec", "-i", "shell", "--", "sh", "-c", "cat; echo err >&2"}, stdout: "piped\nlines\n", stderr: "err\n"},
			{name: "exit code", args: []string{"exec", "shell", "--", "sh", "-c", "exit 3"}, code: 3},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out, errs, code := k.runIn(tc.stdin, tc.args...)
				if code != tc.code || out != tc.stdout || !strings.Contains(errs, tc.stderr) {
					t.Fatalf("kubectl %s: exit %d (want %d)\nstdout %q (want %q)\nstderr %q (want %q in it)", strings.Join(tc.args, " "), code, tc.code, out, tc.stdout, errs, tc.stderr)
				}
			})
		}
	})

	t.Run("exec -t", func(t *testing.T) {
		out, code := k.onTerminal(t, 40, 120, "", "exec", "-it", "shell", "--", "sh", "-c", "[ -t 0 ] && echo terminal; stty size; exit 4")
		if code != 4 || !strings.Contains(out, "terminal\r\n") || !strings.Contains(out, "40 120\r\n") {
			t.Fatalf("kubectl exec -it: exit %d (want 4), output %q", code, out)
		}
	})

	t.Run("cp", func(t *testing.T) {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.txt")
		content := strings.Repeat("podflow cp\n", 10000)
		if err := os.WriteFile(in, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		k.must("cp", in, "shell:/tmp/in.txt")
		if out, _, code := k.run("exec", "shell", "--", "wc", "-c", "/tmp/in.txt"); code != 0 || !strings.HasPrefix(strings.TrimSpace(out), strconv.Itoa(len(content))) {
			t.Fatalf("wc in the pod: exit %d, %q", code, out)
		}
		k.must("exec", "shell", "--", "sh", "-c", "mkdir -p /tmp/d && echo inside > /tmp/d/f")
		k.must("cp", "shell:/tmp/d", filepath.Join(dir, "d"))
		k.must("cp", "shell:/tmp/in.txt", filepath.Join(dir, "back.txt"))
		for file, want := range map[string]string{"d/f": "inside\n", "back.txt": content} {
			if b, err := os.ReadFile(filepath.Join(dir, file)); err != nil || string(b) != want {
				t.Errorf("%s out of the pod: %v, %d bytes (want %d)", file, err, len(b), len(want))
			}
		}
	})

	t.Run("attach", func(t *testing.T) {
		c.mustPodflow("apply", "-f", writeTemp(t, `apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  restartPolicy: Never
  containers:
  - {name: r, image: podflow/busybox:1, stdin: true, stdinOnce: true, command: [sh, -c, "while read l; do echo got $l; done; echo bye"]}
`))
		c.waitPod("default", "reader", "Running", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Running" })
		out, errs, code := k.runIn("a\nb\n", "attach", "-i", "reader")
		if code != 0 || out != "got a\ngot b\nbye\n" {
			t.Fatalf("kubectl attach -i: exit %d, stdout %q, stderr %q", code, out, errs)
		}
		c.waitPod("default", "reader", "Succeeded", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Succeeded" })
	})

	for _, flag := range []string{"-i", "-it"} {
		t.Run("run "+flag+" --rm", func(t *testing.T) {
			name := "run" + strings.TrimPrefix(flag, "-")
			out, errs, code := k.runIn("echo hi from $0\nexit 3\n", "run", flag, "--rm", "--restart=Never", "--image=busybox", name, "--", "sh")
			if code != 3 || !strings.Contains(out, "hi from sh") || !strings.Contains(out, `pod "`+name+`" deleted`) {
				t.Fatalf("kubectl run %s --rm: exit %d (want 3)\nstdout %q\nstderr %q", flag, code, out, errs)
			}
			// kubectl run --rm deletes without waiting (its delete flags
			// default to --wait=false): the node confirms the pod's end, then
			// it is gone.
			eventually(t, 30*time.Second, "the pod gone after run --rm", func() (bool, string) {
				_, errs, code := k.run("get", "pod", name)
				return code != 0 && strings.Contains(errs, "NotFound"), errs
			})
		})
	}

	t.Run("port-forward then HTTP", func(t *testing.T) {
		// busybox httpd in the pod, reached through kubectl port-forward
		// (the node dials the port on the pod's loopback in its network
		// namespace).
		if out, errs, code := k.runIn("", "exec", "shell", "--", "sh", "-c", "mkdir -p /tmp/www && echo hello-through-port-forward > /tmp/www/index.html && httpd -p 8080 -h /tmp/www"); code != 0 {
			t.Fatalf("start httpd: exit %d\n%s%s", code, out, errs)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var out, errb syncBuffer
		cmd := k.cmd(ctx, "port-forward", "pod/shell", ":8080")
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		defer func() { cancel(); <-done }()
		re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
		var local string
		eventually(t, 20*time.Second, "kubectl port-forward to listen", func() (bool, string) {
			m := re.FindStringSubmatch(out.String())
			if m != nil {
				local = m[1]
			}
			return m != nil, out.String() + errb.String()
		})
		client := &http.Client{Timeout: 10 * time.Second}
		for range 2 { // two connections through one port-forward
			resp, err := client.Get("http://127.0.0.1:" + local + "/index.html")
			if err != nil {
				t.Fatalf("GET through port-forward: %v\n%s%s", err, out.String(), errb.String())
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "hello-through-port-forward\n" {
				t.Fatalf("GET through port-forward: %d %q", resp.StatusCode, b)
			}
		}
	})

	t.Run("debug -it --target", func(t *testing.T) {
		// An ephemeral container in the target's PID namespace: its ps
		// shows the target's shell as PID 1, and its own ps.
		out, errs, code := k.runIn("ps -o pid,args\nexit 0\n", "debug", "-it", "pod/shell", "--image=busybox", "--target=sh", "--", "sh")
		if code != 0 || !regexp.MustCompile(`(?m)^\s*1 sh -c trap`).MatchString(out) || !strings.Contains(out, "ps -o pid,args") {
			t.Fatalf("kubectl debug -it --target: exit %d\nstdout %q\nstderr %q", code, out, errs)
		}
		p := c.waitPod("default", "shell", "ephemeral container terminated", func(p *corev1.Pod) bool {
			st := p.GetStatus().GetEphemeralContainerStatuses()
			return len(st) == 1 && st[0].GetState().GetTerminated() != nil
		})
		if st := p.GetStatus().GetEphemeralContainerStatuses()[0]; st.GetState().GetTerminated().GetExitCode() != 0 || st.GetRestartCount() != 0 ||
			p.GetStatus().GetPhase() != "Running" {
			t.Errorf("after kubectl debug: %v, phase %s", st, p.GetStatus().GetPhase())
		}
	})

	c.mustPodflow("delete", "pod", "shell", "--grace-period", "1")
	c.stop()
	if after := kernelObjects(t, "linux-node-1"); after != before {
		t.Fatalf("kernel objects left behind:\nbefore: %s\nafter:  %s", before, after)
	}
}

// onTerminal runs kubectl on a pseudo-terminal of rows×cols (as a user at
// a terminal), typing input, and returns what it wrote and its exit code.
func (k *kubectl) onTerminal(t *testing.T, rows, cols uint16, input string, args ...string) (string, int) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	master := os.NewFile(uintptr(fd), "ptmx")
	defer master.Close()
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := k.cmd(ctx, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	if input != "" {
		if _, err := master.WriteString(input); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	_, _ = io.Copy(&out, master) // EIO once kubectl, the slave's last holder, exits
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return out.String(), 0
}

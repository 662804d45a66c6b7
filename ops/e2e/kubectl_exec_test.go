package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
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

// testKubectlExec runs kubectl exec and attach on a simulated pod, whose
// runtime answers a few builtins (echo, cat, false, …).
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
			if c.name == "over SPDY" {
				t.Setenv("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
			}
			out, errs, code := k.runIn(c.stdin, c.args...)
			if code != c.code || out != c.stdout || !strings.Contains(errs, c.stderr) {
				t.Fatalf("kubectl %s: exit %d (want %d)\nstdout %q (want %q)\nstderr %q (want %q in it)",
					strings.Join(c.args, " "), code, c.code, out, c.stdout, errs, c.stderr)
			}
		})
	}
}

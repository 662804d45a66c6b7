package container_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/container"
)

// TestExecStdio streams an exec's stdin, stdout and stderr (kubectl exec).
func TestExecStdio(t *testing.T) {
	c := start(t, newSpec(t, "sleep", "1000"))
	ctx := ctx20(t)
	env := []string{"PATH=/bin"}
	big := strings.Repeat("0123456789abcdef\n", 64<<10) // 1 MiB, beyond any pipe buffer
	for _, tc := range []struct {
		name           string
		args           []string
		stdin          string
		stdout, stderr string
		code           int
	}{
		{name: "stdin through the command", args: []string{"sh", "-c", "wc -c; echo err >&2"}, stdin: big, stdout: "1114112\n", stderr: "err\n"},
		{name: "large output", args: []string{"cat"}, stdin: big, stdout: big},
		{name: "no stdin", args: []string{"sh", "-c", "cat; echo done"}, stdout: "done\n"},
		{name: "exit code", args: []string{"sh", "-c", "exit 3"}, code: 3},
		{name: "not found", args: []string{"nope"}, code: 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			stdio := container.Stdio{Stdout: &stdout, Stderr: &stderr}
			if tc.stdin != "" {
				stdio.Stdin = strings.NewReader(tc.stdin)
			}
			code, err := c.ExecStdio(ctx, tc.args, env, "", stdio)
			if err != nil || code != tc.code {
				t.Fatalf("ExecStdio = %d, %v; want %d", code, err, tc.code)
			}
			if tc.code == 0 && (stdout.String() != tc.stdout || stderr.String() != tc.stderr) {
				t.Errorf("stdout %.60q (%d bytes) stderr %q, want %.60q %q", stdout.String(), stdout.Len(), stderr.String(), tc.stdout, tc.stderr)
			}
		})
	}
	t.Run("canceled", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		var out bytes.Buffer
		if _, err := c.ExecStdio(short, []string{"sleep", "100"}, env, "", container.Stdio{Stdout: &out}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestExecTTY runs an exec on a terminal (kubectl exec -t): the command
// has a controlling terminal whose size follows the resizes.
func TestExecTTY(t *testing.T) {
	c := start(t, newSpec(t, "sleep", "1000"))
	ctx := ctx20(t)
	sizes := make(chan [2]uint16, 1)
	sizes <- [2]uint16{120, 40}
	resize := func(ctx context.Context) (uint16, uint16, bool) {
		select {
		case s := <-sizes:
			return s[0], s[1], true
		case <-ctx.Done():
			return 0, 0, false
		}
	}
	var out bytes.Buffer
	code, err := c.ExecStdio(ctx, []string{"sh", "-c", "sleep 0.3; [ -t 0 ] && [ -t 1 ] && echo terminal; stty size; read line; echo got $line"},
		[]string{"PATH=/bin"}, "", container.Stdio{Stdin: strings.NewReader("typed\n"), Stdout: &out, TTY: true, Resize: resize})
	if err != nil || code != 0 {
		t.Fatalf("ExecStdio = %d, %v\n%s", code, err, out.String())
	}
	// The terminal echoes the input and ends lines with \r\n.
	for _, want := range []string{"terminal\r\n", "40 120\r\n", "got typed\r\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
}

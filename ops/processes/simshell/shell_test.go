package simshell

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeNet map[string]string

func (n fakeNet) Get(_ context.Context, ns, url string) ([]byte, error) {
	if b, ok := n[ns+" "+url]; ok {
		return []byte(b), nil
	}
	return nil, errors.New("bad address")
}

func newTestShell() (*Shell, *Container) {
	sh := &Shell{FS: NewFS(1 << 20), Net: fakeNet{"default http://web/": "hello from web\n"}}
	c := &Container{Key: Key{"n1", "uid-1", "c"}, Namespace: "default", Pod: "p", IP: "10.244.1.2",
		Env:      []string{"GREETING=hi there"},
		Files:    map[string][]byte{"/etc/hostname": []byte("p\n"), "/etc/config/key": []byte("value")},
		ReadOnly: []string{"/etc/config"}}
	return sh, c
}

// TestShellCommands: each command acts on the container's files and
// environment, or refuses at once with exit 127.
func TestShellCommands(t *testing.T) {
	for _, tc := range []struct {
		name       string
		argv       []string
		stdin      string
		out, errIn string
		code       int
	}{
		{name: "ls /", argv: []string{"ls", "/"}, out: "bin\ndev\netc\nhome\nproc\nroot\nsys\ntmp\nusr\nvar\n"},
		{name: "ls a volume", argv: []string{"ls", "/etc/config"}, out: "key\n"},
		{name: "cat a volume file", argv: []string{"cat", "/etc/config/key"}, out: "value"},
		{name: "cat a missing file", argv: []string{"cat", "/nope"}, errIn: "cat: can't open '/nope': No such file or directory", code: 1},
		{name: "cat stdin", argv: []string{"cat"}, stdin: "piped\n", out: "piped\n"},
		{name: "echo", argv: []string{"echo", "hello", "world"}, out: "hello world\n"},
		{name: "hostname", argv: []string{"hostname"}, out: "p\n"},
		{name: "printenv", argv: []string{"printenv", "GREETING"}, out: "hi there\n"},
		{name: "env", argv: []string{"env"}, out: "GREETING=hi there\nHOME=/root\nHOSTNAME=p\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"},
		{name: "script", argv: []string{"sh", "-c", "echo $GREETING > /tmp/f && cat /tmp/f; ls /tmp"}, out: "hi there\nf\n"},
		{name: "loop and pipe", argv: []string{"sh", "-c", "for i in 1 2 3; do echo $i; done | wc -l"}, out: "3\n"},
		{name: "exit code", argv: []string{"sh", "-c", "exit 3"}, code: 3},
		{name: "false", argv: []string{"false"}, code: 1},
		{name: "read-only volume", argv: []string{"sh", "-c", "echo x > /etc/config/key"}, errIn: "Read-only file system", code: 1},
		{name: "wget a service", argv: []string{"wget", "-qO-", "web"}, out: "hello from web\n"},
		{name: "wget nowhere", argv: []string{"wget", "-qO-", "nowhere"}, errIn: "wget: bad address", code: 1},
		{name: "unknown command", argv: []string{"nope"}, errIn: "nope: command not found (podflow's simulated runtime runs: ", code: 127},
		{name: "unknown in a script", argv: []string{"sh", "-c", "ps aux"}, errIn: "ps: command not found", code: 127},
		{name: "interactive, no terminal", argv: []string{"sh"}, stdin: "cd /tmp\npwd\necho $((1+2))\nexit 4\necho never\n", out: "/tmp\n3\n", code: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh, c := newTestShell()
			var out, errb bytes.Buffer
			st := IO{Stdout: &out, Stderr: &errb}
			if tc.stdin != "" {
				st.Stdin = strings.NewReader(tc.stdin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			code := sh.Exec(ctx, c, tc.argv, st)
			if code != tc.code || out.String() != tc.out || !strings.Contains(errb.String(), tc.errIn) {
				t.Fatalf("%q: exit %d (want %d), stdout %q (want %q), stderr %q (want %q in it)", tc.argv, code, tc.code, out.String(), tc.out, errb.String(), tc.errIn)
			}
		})
	}
}

// TestShellTerminal: with a terminal the shell echoes what is typed,
// prompts, writes \r\n, and Ctrl-C interrupts a sleep at once.
func TestShellTerminal(t *testing.T) {
	sh, c := newTestShell()
	pr, pw := io.Pipe()
	var out syncBuf
	done := make(chan int, 1)
	go func() {
		done <- sh.Exec(context.Background(), c, []string{"sh"}, IO{Stdin: pr, Stdout: &out, TTY: true})
	}()
	write := func(s string) {
		if _, err := pw.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// Type once the prompt is there, as a user does: what is typed before
	// it is echoed before it, as a terminal's line discipline echoes.
	waitFor(t, &out, "/ # ")
	write("echo hi\r")
	waitFor(t, &out, "/ # echo hi\r\nhi\r\n/ # ")
	write("sleep 1000\r")
	waitFor(t, &out, "sleep 1000\r\n")
	write("\x03")
	waitFor(t, &out, "^C\r\n/ # ")
	// An interrupt ends the whole line, not the shell: what follows the
	// interrupted command does not run, and the prompt comes back.
	write("sleep 1000 || echo after\r")
	waitFor(t, &out, "sleep 1000 || echo after\r\n")
	write("\x03")
	waitFor(t, &out, "echo after\r\n^C\r\n/ # ")
	if strings.Contains(out.String(), "\r\nafter\r\n") {
		t.Fatalf("the rest of an interrupted line ran: %q", out.String())
	}
	write("exit 7\r")
	select {
	case code := <-done:
		if code != 7 {
			t.Fatalf("exit %d, want 7; output %q", code, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the shell did not exit; output %q", out.String())
	}
}

// TestProgram: a container's command runs when the shell knows every
// command in it; otherwise the runtime simulates no process (nil).
func TestProgram(t *testing.T) {
	sh, c := newTestShell()
	for _, tc := range []struct {
		image string
		argv  []string
		runs  bool
	}{
		{"busybox", nil, true}, // sh
		{"nginx", nil, false},
		{"busybox", []string{"sleep", "3600"}, true},
		{"busybox", []string{"sh", "-c", "echo hi; sleep 1"}, true},
		{"busybox", []string{"sh", "-c", "nginx -g 'daemon off;'"}, false},
		{"nginx", []string{"nginx", "-g", "daemon off;"}, false},
		{"docker.io/library/alpine:3.20", nil, true},
	} {
		if got := sh.Program(c, tc.image, tc.argv) != nil; got != tc.runs {
			t.Errorf("%s %q: runs %v, want %v", tc.image, tc.argv, got, tc.runs)
		}
	}
}

type syncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func waitFor(t *testing.T, b *syncBuf, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("never saw %q in %q", s, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package nodeexec_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/services/nodeexec"
	"github.com/podflow/podflow/services/pipeline"
)

// echo is a fake node: "cat" copies stdin to stdout, "exit N" exits N,
// "size" prints the first terminal size, "sleep" waits for its end; pod
// "web" alone is on the node.
type echo struct{ ended chan error }

func (e *echo) Exec(ctx context.Context, req nodeexec.Request, st nodeexec.Streams) (err error) {
	defer func() {
		if e.ended != nil {
			e.ended <- err
		}
	}()
	if req.Pod != "web" {
		return fmt.Errorf("%w: pod %q", nodeexec.ErrNotFound, req.Pod)
	}
	switch req.Command[0] {
	case "cat":
		_, err := io.Copy(st.Stdout, st.Stdin)
		fmt.Fprint(st.Stderr, "done")
		return err
	case "exit":
		n, _ := strconv.Atoi(req.Command[1])
		return &nodeexec.ExitError{Code: n}
	case "size":
		sz := <-st.Resize
		fmt.Fprintf(st.Stdout, "%dx%d", sz.Width, sz.Height)
		return nil
	case "sleep":
		<-ctx.Done()
		return context.Cause(ctx)
	}
	return errors.New("unknown command")
}

// warm makes conn's first request and its first request to a node
// (pipeline.AskNode): their response subscriptions live as long as the
// connection, so they are there before goleak's snapshot.
func warm(t *testing.T, conn *bus.Conn) {
	_, _ = conn.NATS().Request("warm", nil, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _ = pipeline.AskNode(ctx, conn.NATS(), "warm", "warm", nil) // its answers' subscription
}

func fastConfig() nodeexec.Config {
	cfg := nodeexec.DefaultConfig()
	cfg.Window, cfg.Chunk = 2, 16 // many frames, a full window often
	cfg.Heartbeat, cfg.LostAfter, cfg.OpenTimeout = 20*time.Millisecond, 200*time.Millisecond, 2*time.Second
	return cfg
}

func TestSession(t *testing.T) {
	srv := bustest.Server(t)
	api := bustest.Connect(t, srv, "api")
	node := bustest.Connect(t, srv, "node")
	warm(t, api)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := fastConfig()
	fake := &echo{}
	s, err := nodeexec.Serve(node.NATS(), cfg, "n1", fake, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	big := strings.Repeat("0123456789", 100) // 63 frames of 16 bytes through a window of 2
	for _, c := range []struct {
		name, pod, node string
		cmd             []string
		stdin           string
		resize          *nodeexec.Size
		stdout, stderr  string
		err             error
		code            int
	}{
		{name: "stdin to stdout", pod: "web", cmd: []string{"cat"}, stdin: big, stdout: big, stderr: "done"},
		{name: "exit code", pod: "web", cmd: []string{"exit", "3"}, code: 3},
		{name: "resize", pod: "web", cmd: []string{"size"}, resize: &nodeexec.Size{Width: 80, Height: 24}, stdout: "80x24"},
		{name: "pod not on the node", pod: "db", cmd: []string{"cat"}, err: nodeexec.ErrNotFound},
		{name: "another node's session", pod: "web", node: "n2", cmd: []string{"cat"}, err: nodeexec.ErrLost},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			st := nodeexec.Streams{Stdin: strings.NewReader(c.stdin), Stdout: &stdout, Stderr: &stderr}
			if c.resize != nil {
				ch := make(chan nodeexec.Size, 1)
				ch <- *c.resize
				st.Resize = ch
			}
			n := c.node
			if n == "" {
				n = "n1"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := nodeexec.Run(ctx, api.NATS(), cfg, nodeexec.Request{Node: n, Namespace: "default", Pod: c.pod, Command: c.cmd}, st)
			var xe *nodeexec.ExitError
			switch {
			case c.err != nil:
				if !errors.Is(err, c.err) {
					t.Fatalf("err = %v, want %v", err, c.err)
				}
			case c.code != 0:
				if !errors.As(err, &xe) || xe.Code != c.code {
					t.Fatalf("err = %v, want exit code %d", err, c.code)
				}
			case err != nil:
				t.Fatal(err)
			}
			if stdout.String() != c.stdout || stderr.String() != c.stderr {
				t.Errorf("stdout %q stderr %q, want %q %q", stdout.String(), stderr.String(), c.stdout, c.stderr)
			}
		})
	}
}

// TestSessionEnds: a session ends on both sides when the client leaves,
// when the node is lost and when the node stops, leaving nothing behind.
func TestSessionEnds(t *testing.T) {
	srv := bustest.Server(t)
	api := bustest.Connect(t, srv, "api")
	cfg := fastConfig()
	for _, c := range []struct {
		name string
		end  func(cancel context.CancelFunc, s *nodeexec.Server, node func())
		want error
		// onNode, when set, is why the node's command must end: a client
		// that leaves cancels it at once, not after LostAfter's silence.
		onNode error
	}{
		{"client leaves", func(cancel context.CancelFunc, _ *nodeexec.Server, _ func()) { cancel() }, context.Canceled, nodeexec.ErrCanceled},
		{"node lost", func(_ context.CancelFunc, _ *nodeexec.Server, closeNode func()) { closeNode() }, nodeexec.ErrLost, nil},
		{"node stops", func(_ context.CancelFunc, s *nodeexec.Server, _ func()) { s.Stop() }, nodeexec.ErrLost, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			node := bustest.Connect(t, srv, "node")
			warm(t, api)
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			fake := &echo{ended: make(chan error, 1)}
			s, err := nodeexec.Serve(node.NATS(), cfg, "n1", fake, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- nodeexec.Run(ctx, api.NATS(), cfg, nodeexec.Request{Node: "n1", Pod: "web", Command: []string{"sleep"}},
					nodeexec.Streams{Stdout: io.Discard})
			}()
			time.Sleep(100 * time.Millisecond) // running
			c.end(cancel, s, func() { node.NATS().Close() })
			if err := <-done; !errors.Is(err, c.want) {
				t.Errorf("client: %v, want %v", err, c.want)
			}
			select {
			case err := <-fake.ended:
				if c.onNode != nil && !errors.Is(err, c.onNode) {
					t.Errorf("node's command ended with %v, want %v", err, c.onNode)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the command still runs on the node")
			}
			s.Stop()
		})
	}
}

// TestServeEveryNode: a server for node "" (a simulated cluster) answers
// every node's sessions, each on its own node's subjects.
func TestServeEveryNode(t *testing.T) {
	srv := bustest.Server(t)
	api := bustest.Connect(t, srv, "api")
	node := bustest.Connect(t, srv, "nodes")
	warm(t, api)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := fastConfig()
	s, err := nodeexec.Serve(node.NATS(), cfg, "", &echo{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	for _, n := range []string{"sim-node-0001", "sim-node-0002"} {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := nodeexec.Run(ctx, api.NATS(), cfg, nodeexec.Request{Node: n, Pod: "web", Command: []string{"cat"}},
			nodeexec.Streams{Stdin: strings.NewReader(n), Stdout: &out, Stderr: io.Discard})
		cancel()
		if err != nil || out.String() != n {
			t.Errorf("node %s: %q, %v", n, out.String(), err)
		}
	}
}

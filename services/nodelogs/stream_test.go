package nodelogs_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/services/nodelogs"
)

// TestStreamFollow: a follower waits at the end of a running container's
// log, gets what is written next, and ends once the container has exited
// and everything is read; LimitBytes cuts the text exactly.
func TestStreamFollow(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "logs")
	var asks atomic.Int32
	const line = "2026-01-01T00:00:00Z stdout F hello\n"
	sub, err := nodelogs.Serve(context.Background(), conn.NATS(), "n1", func(req nodelogs.Request, max int) (nodelogs.Reply, error) {
		n := asks.Add(1)
		rep := nodelogs.Reply{Offset: req.Offset, File: "f", Running: n < 5}
		if n == 3 && req.Offset == 0 { // written while the follower waits
			rep.Data, rep.Offset = []byte(line), int64(len(line))
		}
		switch req.Pod {
		case "missing":
			return rep, errors.New("no such pod")
		case "waiting":
			return rep, &nodelogs.Error{Reason: nodelogs.ReasonBadRequest, Message: `container "c" in pod "waiting" is waiting to start: ContainerCreating`}
		}
		return rep, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	read := func(opts nodelogs.Options) string {
		t.Helper()
		asks.Store(0)
		s, err := nodelogs.Open(ctx, conn.NATS(), "n1", nodelogs.Request{Namespace: "d", Pod: "p"}, opts)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for {
			b, err := s.Next(ctx)
			if errors.Is(err, io.EOF) {
				return string(out)
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b...)
		}
	}
	if got := read(nodelogs.Options{Follow: true, Poll: 10 * time.Millisecond}); got != "hello\n" {
		t.Fatalf("followed %q, want hello", got)
	}
	if got := read(nodelogs.Options{}); got != "" {
		t.Fatalf("without follow %q, want nothing (the line comes later)", got)
	}
	if got := read(nodelogs.Options{Follow: true, Timestamps: true, LimitBytes: 7, Poll: 10 * time.Millisecond}); got != "2026-01" {
		t.Fatalf("limited %q, want 7 bytes with the timestamp", got)
	}
	if _, err := nodelogs.Open(ctx, conn.NATS(), "n1", nodelogs.Request{Pod: "missing"}, nodelogs.Options{}); !errors.Is(err, nodelogs.ErrNode) {
		t.Fatalf("missing pod: %v, want ErrNode", err)
	}
	// A refusal keeps its class and its words across the bus.
	_, err = nodelogs.Open(ctx, conn.NATS(), "n1", nodelogs.Request{Pod: "waiting"}, nodelogs.Options{})
	if ne, ok := errors.AsType[*nodelogs.Error](err); !ok || !errors.Is(err, nodelogs.ErrNode) || ne.Reason != nodelogs.ReasonBadRequest ||
		ne.Message != `container "c" in pod "waiting" is waiting to start: ContainerCreating` {
		t.Fatalf("a refusal: %#v", err)
	}
}

package apiserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/nodelogs"
)

// fakeNodeLog serves a synthetic CRI log of lines records of lineLen on
// node "n1" over the bus, generated from the asked offset (the node holds
// none of it either). Replies wait on gate once past the first two.
type fakeNodeLog struct {
	lines, lineLen int
	gate           chan struct{}
	asks, maxAsked atomic.Int64
	mu             sync.Mutex
	reqs           []nodelogs.Request
}

func (f *fakeNodeLog) record(i int) string {
	text := fmt.Sprintf("line %08d ", i)
	return "2026-01-01T00:00:00.000000000Z stdout F " + text + strings.Repeat("x", f.lineLen-len(text)) + "\n"
}

func (f *fakeNodeLog) read(req nodelogs.Request, limit int) (nodelogs.Reply, error) {
	if n := f.asks.Add(1); n > 2 && f.gate != nil {
		<-f.gate
	}
	f.maxAsked.Store(int64(limit))
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	size := len(f.record(0))
	first := int(req.Offset) / size
	if req.File == "" && req.TailLines != nil {
		first = max(f.lines-int(*req.TailLines), 0)
	}
	var b strings.Builder
	for i := first; i < f.lines && b.Len()+size <= limit; i++ {
		b.WriteString(f.record(i))
	}
	return nodelogs.Reply{Container: "app", Data: []byte(b.String()), Offset: int64((first)*size + b.Len()), File: "f1"}, nil
}

// TestPodLogStreamed: pods/log is streamed from the node a bounded chunk
// at a time (the first bytes reach the client while the node still holds
// the rest back), with tailLines, limitBytes and timestamps honoured, bad
// parameters refused 400, and the server answering the next request.
func TestPodLogStreamed(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	ctx := context.Background()
	if _, err := s.store.Create(ctx, &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "big", Uid: "u-big"},
		Spec: &corev1.PodSpec{NodeName: "n1", Containers: []*corev1.Container{{Name: "app", Image: "busybox"}}}}); err != nil {
		t.Fatal(err)
	}
	node := &fakeNodeLog{lines: 80000, lineLen: 100, gate: make(chan struct{})} // ~10 MiB
	sub, err := nodelogs.Serve(ctx, s.conn.NATS(), "n1", node.read)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	var once sync.Once
	openGate := func() { once.Do(func() { close(node.gate) }) }
	admin := s.client(t, adminToken)
	logURL := s.url + "/api/v1/namespaces/default/pods/big/log"

	t.Run("streamed in bounded chunks", func(t *testing.T) {
		// The client's Timeout bounds the read of the whole body: ~8 MB
		// through the bus in chunks, which takes 15 s under -race at load
		// 20 and twice that at 40. The hang guard here is 2 minutes.
		stream := s.client(t, adminToken)
		stream.Timeout = 2 * time.Minute
		resp, err := stream.Get(logURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		// Two chunks arrive while the node holds the third back: nothing
		// waits for the whole log.
		defer openGate()
		first := make([]byte, nodelogs.ChunkBytes/2) // less than two chunks' text
		done := make(chan error, 1)
		go func() { _, err := io.ReadFull(resp.Body, first); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the first chunks did not arrive before the rest of the log")
		}
		openGate()
		rest, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		total := len(first) + len(rest)
		if want := node.lines * node.lineLen; total != node.lines*(node.lineLen+1) {
			t.Fatalf("read %d bytes, want %d lines of %d (%d)", total, node.lines, node.lineLen+1, want)
		}
		if m := node.maxAsked.Load(); m != nodelogs.ChunkBytes {
			t.Fatalf("chunks asked of up to %d bytes, want nodelogs.ChunkBytes", m)
		}
		if n := node.asks.Load(); n < int64(total/nodelogs.ChunkBytes) {
			t.Fatalf("%d asks for %d bytes: chunks larger than ChunkBytes", n, total)
		}
		if !strings.HasSuffix(string(rest), fmt.Sprintf("line %08d ", node.lines-1)+strings.Repeat("x", node.lineLen-14)+"\n") {
			t.Fatalf("the log does not end with its last line: %q", rest[max(len(rest)-120, 0):])
		}
	})

	get := func(t *testing.T, query string) (int, string) {
		t.Helper()
		resp, err := admin.Get(logURL + "?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	t.Run("tailLines", func(t *testing.T) {
		code, body := get(t, "tailLines=3")
		if code != 200 || strings.Count(body, "\n") != 3 || !strings.HasPrefix(body, fmt.Sprintf("line %08d ", node.lines-3)) {
			t.Fatalf("%d %q, want the last 3 lines", code, body)
		}
	})
	t.Run("limitBytes", func(t *testing.T) {
		code, body := get(t, "limitBytes=150")
		if code != 200 || len(body) != 150 || !strings.HasPrefix(body, "line 00000000 ") {
			t.Fatalf("%d %d bytes, want exactly 150 from the start", code, len(body))
		}
	})
	t.Run("timestamps", func(t *testing.T) {
		code, body := get(t, "tailLines=1&timestamps=true")
		if code != 200 || !strings.HasPrefix(body, "2026-01-01T00:00:00.000000000Z line ") {
			t.Fatalf("%d %q", code, body)
		}
	})
	t.Run("sinceSeconds reaches the node", func(t *testing.T) {
		if code, _ := get(t, "sinceSeconds=60&limitBytes=10"); code != 200 {
			t.Fatalf("status %d", code)
		}
		node.mu.Lock()
		last := node.reqs[len(node.reqs)-1]
		node.mu.Unlock()
		if d := time.Since(time.Unix(0, last.SinceTime)); d < 59*time.Second || d > 2*time.Minute {
			t.Fatalf("node asked from %s ago, want 60s", d)
		}
	})
	for _, q := range []string{"tailLines=-1", "limitBytes=0", "sinceSeconds=x", "sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z"} {
		t.Run("refused "+q, func(t *testing.T) {
			if code, body := get(t, q); code != http.StatusBadRequest {
				t.Fatalf("%d %q, want 400", code, body)
			}
		})
	}
	if code, _, _ := do(t, admin, "GET", s.url+"/api/v1/namespaces/default/pods/big", "", ""); code != 200 {
		t.Fatalf("the next request: %d", code)
	}
}

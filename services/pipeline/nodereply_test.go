package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/services/nodelogs"
	"github.com/podflow/podflow/services/pipeline"
)

// serveLogs answers n's log requests as a node agent does (msg.Respond),
// each after delay (a read of the log file), with a chunk naming the
// node and the request's offset, until the test ends.
func serveLogs(t *testing.T, n *bus.Conn, node string, delay time.Duration) {
	t.Helper()
	sub, err := n.NATS().Subscribe(nodelogs.Subject(node), func(m *nats.Msg) {
		var req nodelogs.Request
		rep := nodelogs.Reply{Container: node}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			rep.Error = err.Error()
		}
		time.Sleep(delay)
		rep.Offset = req.Offset + 1
		b, _ := json.Marshal(rep)
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := n.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
}

// violations collects the asynchronous errors of conn (a refused publish
// is a permissions violation reported there).
func violations(conn *bus.Conn) func() []error {
	var (
		mu   sync.Mutex
		errs []error
	)
	conn.NATS().SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	return func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), errs...)
	}
}

// TestNodeRepliesSurviveAuthReload: a reload of the bus's users (a bus
// user added and removed, as `podflow config bus-user` does) drops the
// "allow responses" grants the NATS server gives a connection for the
// requests it received. The api stage reads logs from a node agent, chunk
// after chunk (nodelogs.Ask), on four streams at once, while the users are
// reloaded back to back: every request is answered, and the node's
// connection is refused nothing. Without the node's grant of its reply
// subjects (pipeline.NodeAgentRole), answers are refused mid-stream.
func TestNodeRepliesSurviveAuthReload(t *testing.T) {
	srv, _ := lockedDown(t)
	api := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.API), "api")
	n1 := bustest.ConnectAs(t, srv, pipeline.NodeRole("n1"), "n1")
	refusedN1 := violations(n1)
	serveLogs(t, n1, "n1", 2*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	reloads, stopReloads := reloadUsers(srv)

	const streams, chunks = 4, 150
	var wg sync.WaitGroup
	fail := make(chan error, streams)
	for s := range streams {
		wg.Go(func() {
			var off int64
			for i := 0; i < chunks || reloads.Load() < 100; i++ {
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				rep, err := nodelogs.Ask(rctx, api.NATS(), "n1", nodelogs.Request{Namespace: "default", Pod: fmt.Sprint("p", s), Offset: off})
				rcancel()
				if err != nil {
					fail <- fmt.Errorf("stream %d, chunk %d: %w", s, i, err)
					return
				}
				if rep.Container != "n1" || rep.Offset != off+1 {
					fail <- fmt.Errorf("stream %d, chunk %d: answer %+v for offset %d", s, i, rep, off)
					return
				}
				off = rep.Offset
			}
		})
	}
	wg.Wait()
	if err := stopReloads(); err != nil {
		t.Fatal(err)
	}
	close(fail)
	for err := range fail {
		t.Error(err)
	}
	for _, err := range refusedN1() {
		t.Errorf("the node's connection was refused: %v", err)
	}
	t.Logf("%d reloads during %d log streams of %d chunks at least", reloads.Load(), streams, chunks)
}

// TestNodeReplySubjects: a node agent may publish its answers into the
// requesters' inboxes for its own node's answers, and nowhere else there:
// not into another node's answers (a forged log chunk in n2's place), not
// into the requester's other inboxes (the store's answers to the api
// stage), not into an identity's that never asks nodes. Nor may it read
// another node's answers. An answer under its own prefix with another
// node's request id is not taken for that node's.
func TestNodeReplySubjects(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	api := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.API), "api")
	n1 := bustest.ConnectAs(t, srv, pipeline.NodeRole("n1"), "n1")
	n2 := bustest.ConnectAs(t, srv, pipeline.NodeRole("n2"), "n2")
	apiInbox := bus.InboxPrefix(pipeline.StageRole(pipeline.API))

	t.Run("allowed", func(t *testing.T) {
		for _, c := range []struct {
			name      string
			sub       *bus.Conn
			requester string
		}{
			{"api stage", api, pipeline.StageRole(pipeline.API)},
			{"admin", admin, bus.RoleAdmin},
		} {
			subject := pipeline.NodeReplyPrefix(c.requester, "n1") + ".abc"
			if !deliversWithin(t, n1, c.sub, subject, bustest.Timeout) {
				t.Errorf("n1 may not answer the %s on %s", c.name, subject)
			}
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, subject := range []string{
			pipeline.NodeReplyPrefix(pipeline.StageRole(pipeline.API), "n2") + ".abc", // n2's answers
			apiInbox + ".Bq9jRMDZpJnl4BkGNvNz4M",                                      // an inbox of the api stage's
			apiInbox + ".Bq9jRMDZpJnl4BkGNvNz4M.1",                                    // its request mux
			apiInbox + ".node",
			pipeline.NodeReplyPrefix(pipeline.StageRole(pipeline.Scheduler), "n1") + ".abc", // a stage that asks no node
		} {
			sub := api
			if !strings.HasPrefix(subject, apiInbox+".") {
				sub = admin
			}
			if delivers(t, n1, sub, subject) {
				t.Errorf("n1 may publish to %s", subject)
			}
		}
		if !subscribeRefused(t, n1, pipeline.NodeReplyPrefix(pipeline.StageRole(pipeline.API), "n1")+".>") {
			t.Errorf("n1 may read the api stage's answers from n1")
		}
	})

	// A request to n2 in flight: n1, which learned its reply subject, forges
	// n2's answer; the api stage gets n2's own.
	t.Run("forged answer", func(t *testing.T) {
		refusedN1 := violations(n1)
		replies := make(chan string, 1)
		answer := make(chan struct{})
		sub, err := n2.NATS().Subscribe(nodelogs.Subject("n2"), func(m *nats.Msg) {
			replies <- m.Reply
			<-answer
			b, _ := json.Marshal(nodelogs.Reply{Container: "from n2"})
			_ = m.Respond(b)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := n2.NATS().Flush(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
		defer cancel()
		got := make(chan nodelogs.Reply, 1)
		asked := make(chan error, 1)
		go func() {
			rep, err := nodelogs.Ask(ctx, api.NATS(), "n2", nodelogs.Request{Namespace: "default", Pod: "p"})
			got <- rep
			asked <- err
		}()
		var reply string
		select {
		case reply = <-replies:
		case <-ctx.Done():
			t.Fatal("n2 got no request")
		}
		if !strings.HasPrefix(reply, pipeline.NodeReplyPrefix(pipeline.StageRole(pipeline.API), "n2")+".") {
			t.Errorf("the request to n2 names reply subject %q, want one under %s", reply, pipeline.NodeReplyPrefix(pipeline.StageRole(pipeline.API), "n2"))
		}
		forged, _ := json.Marshal(nodelogs.Reply{Container: "forged by n1"})
		if err := n1.NATS().Publish(reply, forged); err != nil {
			t.Fatal(err)
		}
		// The same request id under n1's own answers, which the bus lets
		// n1 publish to and the api stage's subscription receives: not the
		// subject the request named.
		own := strings.Replace(reply, ".node.n2.", ".node.n1.", 1)
		if err := n1.NATS().Publish(own, forged); err != nil {
			t.Fatal(err)
		}
		if err := n1.NATS().Flush(); err != nil {
			t.Fatal(err)
		}
		// The refusal reaches n1 before the flush's PONG.
		deadline := time.Now().Add(bustest.Timeout)
		for len(refusedN1()) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		close(answer)
		if rep, err := <-got, <-asked; err != nil || rep.Container != "from n2" {
			t.Errorf("the api stage's request to n2 got %+v, %v; want n2's answer", rep, err)
		}
		if errs := refusedN1(); len(errs) == 0 || !errors.Is(errs[0], nats.ErrPermissionViolation) {
			t.Errorf("n1's forgery was not refused: %v", errs)
		}
	})
}

// TestAskNodeNoResponders: a request to a node no agent serves fails at
// once with nats.ErrNoResponders, as a NATS request does.
func TestAskNodeNoResponders(t *testing.T) {
	t.Parallel()
	srv, _ := lockedDown(t)
	api := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.API), "api")
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	_, err := pipeline.AskNode(ctx, api.NATS(), nodelogs.Subject("n2"), "n2", nil)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("AskNode of a node nobody serves: %v, want %v", err, nats.ErrNoResponders)
	}
}

// BenchmarkAskNode compares a node request answered into an explicit
// reply subject (AskNode: a subscription per request) with nats.go's
// request over its shared reply subscription (the dynamic reply grant),
// over the embedded server with podflow's roles.
func BenchmarkAskNode(b *testing.B) {
	srv, _ := lockedDown(b)
	api := bustest.ConnectAs(b, srv, pipeline.StageRole(pipeline.API), "api")
	n1 := bustest.ConnectAs(b, srv, pipeline.NodeRole("n1"), "n1")
	sub, err := n1.NATS().Subscribe(nodelogs.Subject("n1"), func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := n1.NATS().Flush(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	data := []byte(`{"namespace":"default","pod":"p"}`)
	for _, c := range []struct {
		name string
		ask  func() error
	}{
		{"explicit-reply", func() error {
			_, err := pipeline.AskNode(ctx, api.NATS(), nodelogs.Subject("n1"), "n1", data)
			return err
		}},
		{"reply-grant", func() error {
			_, err := api.NATS().Request(nodelogs.Subject("n1"), data, bustest.Timeout)
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.ask(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/pipeline"
)

// storeRequests sums the watch starts and the reads (lists included) every
// replica served.
func storeRequests(t *testing.T, admin *raftstore.Client) (watches, reads uint64) {
	t.Helper()
	w, r, _ := storeStatus(t, admin)
	return w, r
}

// storeStatus is storeRequests and the lowest revision a replica applied.
func storeStatus(t *testing.T, admin *raftstore.Client) (watches, reads uint64, applied int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	st, err := admin.Status(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 3 {
		t.Fatalf("status of %d replicas, want 3", len(st))
	}
	applied = st[0].Revision
	for _, s := range st {
		applied = min(applied, s.Revision)
		watches += s.Counters.WatchRequests
		reads += s.Counters.ReadRequests + s.Counters.StaleReadRequests
	}
	return watches, reads, applied
}

// TestStoreStreamsSurviveAuthReload: a reload of the bus's users (a bus
// user added and removed, as `podflow config bus-user` does) resets the
// "allow responses" grants the NATS server gives a connection for the
// requests it received. A stage's store client acknowledges watch
// heartbeats and list windows all the time; with reloads back to back, over
// the embedded server with podflow's roles and three real replicas, no
// acknowledgement is refused (no publish violation on the stage's
// connection), no watch resumes, no list is asked again, and every watch delivers every change in order.
func TestStoreStreamsSurviveAuthReload(t *testing.T) {
	srv, _ := lockedDown(t)
	client := storeReplicas(t, srv, 3, func(c *raftstore.Config) {
		// Heartbeats often, so that acknowledgements cross the reloads
		// all the time; a refused one is a publish violation on the
		// stage's connection, checked below. A watch is dropped only after
		// 60 in a row unanswered (3 s): at load 40 under -race the
		// client's goroutines can be starved for 500 ms, which is not
		// what this test is about.
		c.WatchHeartbeat = 50 * time.Millisecond
		c.WatchMissedHeartbeats = 60
		c.ListChunkBytes = 4 << 10 // a list of 60 × 3 KiB: about 12 acknowledgements
		// No leader change on a loaded machine (a linearizable list
		// would be asked again, for another reason than this test's).
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, time.Second
	})
	admin := client(bus.RoleAdmin, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var created int64
	for i := range 60 {
		var err error
		if created, err = admin.Create(ctx, fmt.Sprintf("/registry/configmaps/default/big-%02d", i), []byte(strings.Repeat("x", 3<<10))); err != nil {
			t.Fatal(err)
		}
	}

	role := pipeline.StageRole(pipeline.DaemonSet)
	conn := bustest.ConnectAs(t, srv, role, "daemonset-1")
	var (
		errMu   sync.Mutex
		connErr []error
	)
	conn.NATS().SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		errMu.Lock()
		connErr = append(connErr, err)
		errMu.Unlock()
	})
	stage, err := raftstore.NewClient(conn.NATS(), raftstore.ClientConfig{
		User: role, Timeout: time.Minute, AttemptTimeout: 5 * time.Second, WatchHeartbeatTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every replica holds every key before the stale lists start (a
	// replica behind would answer one Unavailable: a list asked again).
	var watches0, reads0 uint64
	raftstoretest.WaitFor(t, bustest.Timeout, "every replica to apply the keys", func() bool {
		var applied int64
		watches0, reads0, applied = storeStatus(t, admin)
		return applied >= created
	})

	const (
		nWatches = 8
		nTicks   = 40
	)
	prefix := "/registry/configmaps/ticks/"
	_, rev, err := stage.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var ws []*raftstore.Watch
	for range nWatches {
		w, err := stage.Watch(ctx, prefix, rev)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ws = append(ws, w)
	}

	// Reload the bus's users back to back until the streams are done.
	reloads, stopReloads := reloadUsers(srv)

	// Paged lists and writes while the watches idle on heartbeats.
	var (
		wg    sync.WaitGroup
		lists atomic.Int64
		fail  = make(chan error, 3)
	)
	for l := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Until the reloads have had their chance, 6 lists at least.
			for i := 0; i < 6 || reloads.Load() < 200; i++ {
				time.Sleep(20 * time.Millisecond)
				var opts []raftstore.ReadOption
				if l == 1 {
					opts = append(opts, raftstore.Stale()) // any replica
				}
				lists.Add(1)
				kvs, _, err := stage.List(ctx, "/registry/configmaps/default/", opts...)
				if err != nil {
					fail <- fmt.Errorf("list: %w", err)
					return
				}
				if len(kvs) != 60 {
					fail <- fmt.Errorf("list: %d keys, want 60", len(kvs))
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range nTicks {
			if _, err := admin.Create(ctx, fmt.Sprintf("%s%02d", prefix, i), []byte("tick")); err != nil {
				fail <- fmt.Errorf("tick %d: %w", i, err)
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(fail)
	for err := range fail {
		t.Error(err)
	}
	for i, w := range ws {
		for n := range nTicks {
			select {
			case ev, ok := <-w.Events():
				if !ok {
					t.Fatalf("watch %d ended: %v", i, w.Err())
				}
				if want := fmt.Sprintf("%s%02d", prefix, n); ev.KV.Key != want {
					t.Fatalf("watch %d: event %d is %s, want %s", i, n, ev.KV.Key, want)
				}
			case <-ctx.Done():
				t.Fatalf("watch %d: %d events of %d", i, n, nTicks)
			}
		}
	}
	if err := stopReloads(); err != nil {
		t.Fatal(err)
	}

	errMu.Lock()
	for _, err := range connErr {
		t.Errorf("the stage's connection was refused: %v", err)
	}
	errMu.Unlock()
	watches, reads := storeRequests(t, admin)
	if got := watches - watches0; got != nWatches {
		t.Errorf("%d watch starts for %d watches: a watch resumed", got, nWatches)
	}
	if got, want := reads-reads0, uint64(lists.Load())+1; got != want {
		t.Errorf("%d reads for %d lists: a list was asked again", got, want)
	}
	t.Logf("%d reloads, %d lists, %d watches", reloads.Load(), lists.Load(), nWatches)
}

// TestStoreAckForgery: a list's flow control waits for its reader's
// acknowledgement on the store's acknowledgement subject of that stream,
// which names the reader. Another role that learned the subject (the
// stream's id) may not publish there (the bus refuses it), and its own
// name's variant of the subject, which it may publish to, neither an
// acknowledgement nor a "no responders" status, moves or ends the stream:
// the replica sends nothing more until the reader itself acknowledges, and
// then the whole list.
func TestStoreAckForgery(t *testing.T) {
	srv, _ := lockedDown(t)
	client := storeReplicas(t, srv, 1, func(c *raftstore.Config) { c.ListChunkBytes = 4 << 10 })
	admin := client(bus.RoleAdmin, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const keys = 30
	for i := range keys {
		if _, err := admin.Create(ctx, fmt.Sprintf("/registry/configmaps/default/big-%02d", i), []byte(strings.Repeat("x", 3<<10))); err != nil {
			t.Fatal(err)
		}
	}

	reader := pipeline.StageRole(pipeline.DaemonSet)
	a := bustest.ConnectAs(t, srv, reader, "daemonset-1").NATS()
	forger := pipeline.StageRole(pipeline.Endpoints)
	b := bustest.ConnectAs(t, srv, forger, "endpoints-1").NATS()
	refusedB := make(chan error, 16)
	b.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case refusedB <- err:
		default:
		}
	})

	// The reader asks for a chunked list and acknowledges nothing yet.
	inbox := a.NewInbox()
	chunks := make(chan *nats.Msg, 64)
	if _, err := a.ChanSubscribe(inbox, chunks); err != nil {
		t.Fatal(err)
	}
	req, err := proto.Marshal(&storev1.ReadRequest{Key: "/registry/configmaps/default/", Prefix: true, Stale: true, Chunked: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PublishRequest(bus.StorePrefix+".stale."+reader, inbox, req); err != nil {
		t.Fatal(err)
	}
	var (
		got       int
		windowEnd *nats.Msg // the last chunk that asked for an acknowledgement
	)
	next := func(within time.Duration) *storev1.ReadResponse {
		t.Helper()
		select {
		case m := <-chunks:
			var resp storev1.ReadResponse
			if err := proto.Unmarshal(m.Data, &resp); err != nil {
				t.Fatal(err)
			}
			if err := resp.GetError(); err != nil {
				t.Fatalf("list: %v", err)
			}
			got += len(resp.Kvs)
			if m.Reply != "" {
				windowEnd = m
			}
			return &resp
		case <-time.After(within):
			return nil
		}
	}
	var ask *nats.Msg
	for ask == nil {
		if next(bustest.Timeout) == nil {
			t.Fatal("no chunk asks for an acknowledgement")
		}
		ask, windowEnd = windowEnd, nil
	}
	if !strings.HasSuffix(ask.Reply, "."+reader) || !strings.HasPrefix(ask.Reply, bus.StorePrefix+".ack.") {
		t.Fatalf("acknowledgement subject %q: want %s.ack.….%s", ask.Reply, bus.StorePrefix, reader)
	}

	// The forger acknowledges the reader's stream: refused by the bus.
	if err := b.Publish(ask.Reply, nil); err != nil {
		t.Fatal(err)
	}
	_ = b.Flush()
	select {
	case err := <-refusedB:
		if !strings.Contains(err.Error(), "Permissions Violation for Publish") {
			t.Fatalf("the forger's acknowledgement: %v", err)
		}
	case <-time.After(bustest.Timeout):
		t.Fatal("the bus let another role acknowledge the reader's stream")
	}
	// Its own name's variant: allowed by the bus, ignored by the store,
	// whether an acknowledgement or a "no responders" status.
	own := strings.TrimSuffix(ask.Reply, reader) + forger
	if err := b.Publish(own, nil); err != nil {
		t.Fatal(err)
	}
	status := nats.NewMsg(own)
	status.Header.Set("Status", "503")
	if err := b.PublishMsg(status); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refusedB:
		t.Fatalf("the forger may not publish to its own acknowledgement subjects: %v", err)
	default:
	}
	if resp := next(time.Second); resp != nil {
		t.Fatalf("the replica sent chunk %d without the reader's acknowledgement", resp.Chunk)
	}

	// The reader's own acknowledgement: the rest of the list.
	if err := ask.Respond(nil); err != nil {
		t.Fatal(err)
	}
	for {
		resp := next(bustest.Timeout)
		if resp == nil {
			t.Fatalf("the list stopped at %d keys of %d", got, keys)
		}
		if windowEnd != nil {
			_ = windowEnd.Respond(nil)
			windowEnd = nil
		}
		if resp.Last {
			break
		}
	}
	if got != keys {
		t.Fatalf("the list has %d keys, want %d", got, keys)
	}
}

// TestStoreRepliesOnlyToOwnInbox: a stage names another stage's inbox as a
// read's reply subject and as a watch's inbox. The store publishes to any
// subject, so without raftstore.Config.ReplyACL the victim's inbox gets
// the answer and the watch stream; with it the read is dropped, the watch
// refused with CODE_FORBIDDEN, and the same read into the stage's own
// inbox is answered.
func TestStoreRepliesOnlyToOwnInbox(t *testing.T) {
	srv, _ := lockedDown(t)
	client := storeReplicas(t, srv, 1)
	admin := client(bus.RoleAdmin, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "/registry/configmaps/default/own-inbox"
	rev, err := admin.Create(ctx, key, []byte("v"))
	if err != nil {
		t.Fatal(err)
	}

	attacker := pipeline.StageRole(pipeline.DaemonSet)
	a := bustest.ConnectAs(t, srv, attacker, "daemonset-1").NATS()
	victim := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.Endpoints), "endpoints-1").NATS()
	victimInbox := victim.NewInbox()
	stolen := make(chan *nats.Msg, 16)
	if _, err := victim.ChanSubscribe(victimInbox, stolen); err != nil {
		t.Fatal(err)
	}
	if err := victim.Flush(); err != nil {
		t.Fatal(err)
	}

	read, err := proto.Marshal(&storev1.ReadRequest{Key: key, Stale: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PublishRequest(bus.StorePrefix+".stale."+attacker, victimInbox, read); err != nil {
		t.Fatal(err)
	}
	watch, err := proto.Marshal(&storev1.WatchRequest{Prefix: "/registry/configmaps/", Inbox: victimInbox})
	if err != nil {
		t.Fatal(err)
	}
	m, err := a.Request(bus.StorePrefix+".watch."+attacker, watch, bustest.Timeout)
	if err != nil {
		t.Fatalf("watch into another's inbox: %v", err)
	}
	var wr storev1.WatchResponse
	if err := proto.Unmarshal(m.Data, &wr); err != nil {
		t.Fatal(err)
	}
	if wr.GetError().GetCode() != storev1.Code_CODE_FORBIDDEN {
		t.Fatalf("watch into another's inbox answered %v, want CODE_FORBIDDEN", wr.GetError())
	}
	// The same read into the attacker's own inbox is answered: the store
	// has served every request above by the time it answers this one.
	m, err = a.Request(bus.StorePrefix+".stale."+attacker, read, bustest.Timeout)
	if err != nil {
		t.Fatalf("read into its own inbox: %v", err)
	}
	var rr storev1.ReadResponse
	if err := proto.Unmarshal(m.Data, &rr); err != nil || rr.GetError() != nil || len(rr.GetKvs()) != 1 {
		t.Fatalf("read into its own inbox: %v %v", err, rr.GetError())
	}
	if _, err := admin.Update(ctx, key, []byte("changed"), rev); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-stolen:
		t.Fatalf("the victim's inbox got %d bytes from the store", len(m.Data))
	case <-time.After(time.Second):
	}
}

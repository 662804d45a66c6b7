package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// collect reads n events from w, failing after 20 s.
func collect(t *testing.T, w *raftstore.Watch, n int) []raftstore.WatchEvent {
	t.Helper()
	var out []raftstore.WatchEvent
	timeout := time.After(20 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended after %d of %d events: %v", len(out), n, w.Err())
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("got %d of %d events in 20 s", len(out), n)
		}
	}
	return out
}

func eventString(e raftstore.WatchEvent) string {
	return fmt.Sprintf("%s %s=%q c=%d m=%d @%d", e.Type, e.KV.Key, e.KV.Value, e.KV.CreateRevision, e.KV.ModRevision, e.Revision)
}

func TestWatchBasics(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)
	r0, _ := cl.Create(ctx, "/registry/pods/a/x", []byte("before"))

	w, err := cl.Watch(ctx, "/registry/pods/a/", r0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	r1, _ := cl.Update(ctx, "/registry/pods/a/x", []byte("v1"), r0)
	if _, err := cl.Create(ctx, "/registry/pods/b/other", nil); err != nil { // other prefix: not seen
		t.Fatal(err)
	}
	r2, _ := cl.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{
		{Type: raftstore.OpPut, Key: "/registry/pods/a/y", Value: []byte("y")},
		{Type: raftstore.OpDelete, Key: "/registry/pods/a/x"},
	}})
	got := collect(t, w, 3)
	want := []string{
		fmt.Sprintf("PUT /registry/pods/a/x=\"v1\" c=%d m=%d @%d", r0, r1, r1),
		fmt.Sprintf("PUT /registry/pods/a/y=\"y\" c=%d m=%d @%d", r2, r2, r2),
		fmt.Sprintf("DELETE /registry/pods/a/x=\"v1\" c=%d m=%d @%d", r0, r2, r2),
	}
	for i := range want {
		if s := eventString(got[i]); s != want[i] {
			t.Errorf("event %d = %s, want %s", i, s, want[i])
		}
	}
	w.Stop()
	if _, ok := <-w.Events(); ok {
		t.Fatal("events not closed after Stop")
	}
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("Err after Stop = %v, want context.Canceled", w.Err())
	}
}

// TestWatchAcrossReplicaFailures kills every replica in turn (the one
// serving the watch among them), by shutdown and by crash, during a stream
// of writes: the watch must
// deliver exactly the sequence a fresh watch from 0 sees afterwards, in
// order, with no gaps and no duplicates, including every acknowledged write.
func TestWatchAcrossReplicaFailures(t *testing.T) {
	t.Run("shutdown", func(t *testing.T) { testWatchAcrossFailures(t, (*raftstoretest.Cluster).Kill) })
	t.Run("crash", func(t *testing.T) { testWatchAcrossFailures(t, (*raftstoretest.Cluster).Crash) })
}

func testWatchAcrossFailures(t *testing.T, kill func(*raftstoretest.Cluster, testing.TB, int)) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)
	w, err := cl.Watch(ctx, "/w/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	var (
		mu       sync.Mutex
		acked    = map[int64]bool{}
		ackCount atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wc := c.Client(t) // clients are made on the test goroutine: they may t.Fatal
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rev, err := wc.Create(ctx, fmt.Sprintf("/w/%05d", i), []byte(fmt.Sprint(i)))
			if err == nil {
				mu.Lock()
				acked[rev] = true
				mu.Unlock()
				ackCount.Add(1)
			}
		}
	}()
	// Kill each replica in turn, with writes before, during and after.
	for i := range c.Len() {
		waitAcks(t, &ackCount, ackCount.Load()+20)
		kill(c, t, i)
		waitAcks(t, &ackCount, ackCount.Load()+20)
		c.Restart(t, i)
	}
	waitAcks(t, &ackCount, ackCount.Load()+20)
	close(stop)
	wg.Wait()
	c.WaitForReplication(t)

	_, rev, err := cl.List(ctx, "/w/")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := c.Client(t).Watch(ctx, "/w/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Stop()
	n := 0
	for _, i := range c.Live() {
		kvs, _ := c.Node(i).LocalList("/w/")
		n = len(kvs)
	}
	want := collect(t, ref, n)
	got := collect(t, w, n)
	if len(acked) == 0 || want[len(want)-1].Revision != rev {
		t.Fatalf("%d acked writes, reference watch ends at %d, list at %d", len(acked), want[len(want)-1].Revision, rev)
	}
	seen := map[int64]bool{}
	for i := range want {
		if eventString(got[i]) != eventString(want[i]) {
			t.Fatalf("event %d = %s, want %s", i, eventString(got[i]), eventString(want[i]))
		}
		if i > 0 && got[i].Revision <= got[i-1].Revision {
			t.Fatalf("event %d at revision %d after %d: out of order or duplicated", i, got[i].Revision, got[i-1].Revision)
		}
		seen[got[i].Revision] = true
	}
	for r := range acked {
		if !seen[r] {
			t.Fatalf("acknowledged write at revision %d missing from the watch", r)
		}
	}
	select {
	case ev := <-w.Events():
		t.Fatalf("extra event after the last write: %s", eventString(ev))
	case <-time.After(200 * time.Millisecond):
	}
	t.Logf("%d events, %d acknowledged writes, final revision %d", n, len(acked), rev)
}

func TestWatchResumeFromRevision(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)
	var revs []int64
	for i := range 10 {
		r, err := cl.Create(ctx, fmt.Sprintf("/r/%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r)
	}
	w, err := cl.Watch(ctx, "/r/", revs[4])
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	got := collect(t, w, 5)
	for i, ev := range got {
		if ev.Revision != revs[5+i] {
			t.Fatalf("resumed event %d at revision %d, want %d", i, ev.Revision, revs[5+i])
		}
	}
}

func TestWatchGoneAfterCompaction(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) { cfg.HistoryRevisions = 16 })
	cl := c.Client(t)
	ctx := testCtx(t)
	first, _ := cl.Create(ctx, "/g/first", nil)
	w, err := cl.Watch(ctx, "/g/", first)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The live watch is read in step with the writes, so it is never
	// behind the window: left unread, its sender on the replica could fall
	// 16 revisions behind on a loaded machine and end with "compacted",
	// as etcd's would.
	var last int64
	for i := range 60 {
		r, err := cl.Create(ctx, fmt.Sprintf("/g/%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if ev := collect(t, w, 1)[0]; ev.Revision != r {
			t.Fatalf("live watch event %d at revision %d, want %d", i, ev.Revision, r)
		}
		last = r
	}
	c.WaitForReplication(t)
	if _, err := cl.Watch(ctx, "/g/", first); !errors.Is(err, raftstore.ErrGone) {
		t.Fatalf("watch from compacted revision %d: got %v, want ErrGone", first, err)
	}
	// A watch from within the window works.
	w2, err := cl.Watch(ctx, "/g/", last-10)
	if err != nil {
		t.Fatalf("watch within the history window: %v", err)
	}
	defer w2.Stop()
	if got := collect(t, w2, 10); got[9].Revision != last {
		t.Fatalf("last event at %d, want %d", got[9].Revision, last)
	}
	// The live watch outlives the compaction of every revision it saw.
	r, err := cl.Create(ctx, "/g/after", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev := collect(t, w, 1)[0]; ev.Revision != r {
		t.Fatalf("live watch after the compaction: event at %d, want %d", ev.Revision, r)
	}
}

// TestQuietWatchResumesPastCompaction: a watch of a prefix that has not
// changed while thousands of other writes were compacted from the history
// resumes on another replica from the progress the replicas reported, not
// from its last event's revision, which is gone: without that it would end
// with ErrGone and every such informer would relist.
func TestQuietWatchResumesPastCompaction(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) {
		cfg.HistoryRevisions = 16
		cfg.WatchHeartbeat = 20 * time.Millisecond
	})
	cl := c.Client(t)
	ctx := testCtx(t)
	first, err := cl.Create(ctx, "/quiet/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cl.Watch(ctx, "/quiet/", first)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The writes go at the pace of the replica's heartbeats, which carry
	// the progress: a sender that fell 16 revisions behind would end the
	// stream as compacted, as etcd's would.
	var last int64
	for i := range 60 {
		if last, err = cl.Create(ctx, fmt.Sprintf("/busy/%d", i), nil); err != nil {
			t.Fatal(err)
		}
		waitProgress(ctx, t, w, last)
	}
	c.WaitForReplication(t)
	// Every replica in turn goes away: the session resumes at least once.
	for i := range c.Len() {
		c.Kill(t, i)
		c.Restart(t, i)
	}
	r, err := cl.Create(ctx, "/quiet/b", nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatalf("the quiet watch ended: %v", w.Err())
		}
		if ev.Revision != r || ev.KV.Key != "/quiet/b" {
			t.Fatalf("event %s, want /quiet/b at %d", eventString(ev), r)
		}
	case <-ctx.Done():
		t.Fatalf("no event for /quiet/b: %v", ctx.Err())
	}
}

// waitProgress waits until w reports progress to rev, failing on any event.
func waitProgress(ctx context.Context, t *testing.T, w *raftstore.Watch, rev int64) {
	t.Helper()
	for w.Progress() < rev {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("the quiet watch ended at progress %d: %v", w.Progress(), w.Err())
			}
			t.Fatalf("event %s under a prefix nobody wrote", eventString(ev))
		case <-ctx.Done():
			t.Fatalf("progress %d, want %d: %v", w.Progress(), rev, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestWatchersShareEncodings runs watchers of one prefix on one replica,
// which share each event's encoding: started before, during and after a
// stream of writes, at different revisions, one reading only once the
// writes are done, one of a narrower prefix. With a cache far smaller than
// the writes (its generations turn over many times, so the late watchers
// catch up past what it holds) and with the default one, each must get
// exactly the events after its revision under its prefix, in order, the
// two events of one revision included.
func TestWatchersShareEncodings(t *testing.T) {
	for _, cache := range []int{512, raftstore.DefaultConfig().WatchCacheBytes} {
		t.Run(fmt.Sprint("cache=", cache), func(t *testing.T) {
			c := raftstoretest.MakeCluster(t, 1, func(cfg *raftstore.Config) { cfg.WatchCacheBytes = cache })
			cl := c.Client(t)
			ctx := testCtx(t)
			const writes = 150
			type expected struct {
				w    *raftstore.Watch
				from int64
				pre  string
			}
			var watchers []expected
			start := func(pre string, from int64) {
				w, err := cl.Watch(ctx, pre, from)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(w.Stop)
				watchers = append(watchers, expected{w, from, pre})
			}
			var all []string // every event, as eventString
			var revs []int64
			start("/s/", 0)
			start("/s/", 0)
			start("/s/odd/", 0)
			for i := range writes {
				key := fmt.Sprintf("/s/even/%d", i)
				if i%2 == 1 {
					key = fmt.Sprintf("/s/odd/%d", i)
				}
				r, err := cl.Create(ctx, key, []byte(fmt.Sprintf("value %d %0100d", i, i)))
				if err != nil {
					t.Fatal(err)
				}
				revs = append(revs, r)
				all = append(all, fmt.Sprintf("PUT %s=%q c=%d m=%d @%d", key, fmt.Sprintf("value %d %0100d", i, i), r, r, r))
				if i == writes/3 {
					start("/s/", revs[writes/6])
				}
			}
			// Two events at one revision: the sharing tells events apart, not revisions.
			if _, err := cl.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{
				{Type: raftstore.OpPut, Key: "/s/odd/x", Value: []byte("x")},
				{Type: raftstore.OpDelete, Key: "/s/odd/1"},
			}}); err != nil {
				t.Fatal(err)
			}
			start("/s/", revs[writes/2])
			start("/s/", 0)
			for i, x := range watchers {
				var want []string
				for j, e := range all {
					if revs[j] > x.from && strings.HasPrefix(strings.Fields(e)[1], x.pre) {
						want = append(want, e)
					}
				}
				got := collect(t, x.w, len(want))
				for j := range want {
					if s := eventString(got[j]); s != want[j] {
						t.Fatalf("watcher %d (%s from %d): event %d = %s, want %s", i, x.pre, x.from, j, s, want[j])
					}
				}
				last := collect(t, x.w, 2) // the txn, after the writes
				if last[0].KV.Key != "/s/odd/x" || last[1].Type != raftstore.EventDelete || last[1].KV.Key != "/s/odd/1" || last[0].Revision != last[1].Revision {
					t.Fatalf("watcher %d: after the writes got %s, %s; want the txn's put and delete", i, eventString(last[0]), eventString(last[1]))
				}
			}
		})
	}
}

// TestWatchExcept: a watch of a wide prefix leaves out the changes under
// its excluded prefixes — the replica never sends them — while its
// progress still covers their revisions; a request that would exclude
// everything or too much is refused.
func TestWatchExcept(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)
	w, err := cl.Watch(ctx, "/registry/", 0, raftstore.WatchExcept("/registry/events/", "/registry/podflow/"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var last int64
	for _, k := range []string{"/registry/pods/a/x", "/registry/events/a/x.1", "/registry/podflow/requestids/r1", "/registry/eventsx/a", "/registry/podflow/hosts/h"} {
		if last, err = cl.Create(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	got := collect(t, w, 2)
	if got[0].KV.Key != "/registry/pods/a/x" || got[1].KV.Key != "/registry/eventsx/a" {
		t.Fatalf("events %s, %s; want the pod and eventsx only", eventString(got[0]), eventString(got[1]))
	}
	// Nothing else arrives, and the progress reaches the last, excluded write.
	deadline := time.Now().Add(20 * time.Second)
	for w.Progress() < last && time.Now().Before(deadline) {
		select {
		case ev := <-w.Events():
			t.Fatalf("excluded change delivered: %s", eventString(ev))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if w.Progress() < last {
		t.Fatalf("progress %d, want %d (the excluded writes' revisions covered)", w.Progress(), last)
	}

	for name, except := range map[string][]string{
		"empty":    {"/registry/events/", ""},
		"too many": strings.Split(strings.Repeat("/registry/x/,", raftstore.MaxWatchExcept+1), ",")[:raftstore.MaxWatchExcept+1],
	} {
		if _, err := cl.Watch(ctx, "/registry/", 0, raftstore.WatchExcept(except...)); !errors.Is(err, raftstore.ErrInvalid) {
			t.Errorf("%s: Watch = %v, want ErrInvalid", name, err)
		}
	}
}

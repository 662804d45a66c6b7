package raftstore

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
)

func testEvents(n int) []*storev1.Event {
	var out []*storev1.Event
	for i := range n {
		typ := storev1.EventType_EVENT_TYPE_PUT
		if i%3 == 2 {
			typ = storev1.EventType_EVENT_TYPE_DELETE
		}
		rev := int64(10 + i)
		out = append(out, &storev1.Event{Type: typ, Revision: rev, Kv: &storev1.KeyValue{
			Key: fmt.Sprintf("/registry/pods/ns/p-%d-é", i), Value: bytes.Repeat([]byte{byte(i)}, i*7),
			CreateRevision: 10, ModRevision: rev,
		}})
	}
	return out
}

// TestAppendWatchEventsIsMarshal: a message assembled from the shared
// encodings is byte for byte the WatchMessage vt.Marshal encodes, on a
// cache miss and on a hit, with and without a revision.
func TestAppendWatchEventsIsMarshal(t *testing.T) {
	n := &Node{cfg: Config{WatchCacheBytes: 1 << 20}}
	events := testEvents(7)
	for round := range 2 { // a miss, then hits
		for _, rev := range []int64{0, 16, 1 << 40} {
			got, err := n.appendWatchEvents([]byte("junk"), 42, events, rev)
			if err != nil {
				t.Fatal(err)
			}
			want, err := vt.Marshal(&storev1.WatchMessage{Seq: 42, Events: events, Revision: rev})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[len("junk"):], want) || string(got[:len("junk")]) != "junk" {
				t.Fatalf("round %d revision %d: assembled %x\nwant junk+%x", round, rev, got, want)
			}
		}
	}
	for _, e := range events {
		if _, ok := n.wire.cur[e]; !ok {
			t.Fatalf("event %d not in the shared cache", e.Revision)
		}
	}
}

// TestAppendWatchEventsOpensSecrets: an encrypted value goes to the
// watcher decrypted, and its plaintext stays out of the shared cache.
func TestAppendWatchEventsOpensSecrets(t *testing.T) {
	e, err := ParseEncryptionConfig([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: k1, secret: " + b64(32) + "}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{cfg: Config{WatchCacheBytes: 1 << 20, Encryption: e}, log: hclog.NewNullLogger()}
	const key = "/registry/secrets/ns/s"
	plain := []byte("hunter2-plaintext")
	sealed, err := e.encrypt(key, plain)
	if err != nil {
		t.Fatal(err)
	}
	stored := []*storev1.Event{
		{Type: storev1.EventType_EVENT_TYPE_PUT, Revision: 5, Kv: &storev1.KeyValue{Key: "/registry/pods/ns/p", Value: []byte("pod"), CreateRevision: 5, ModRevision: 5}},
		{Type: storev1.EventType_EVENT_TYPE_PUT, Revision: 6, Kv: &storev1.KeyValue{Key: key, Value: sealed, CreateRevision: 6, ModRevision: 6}},
	}
	got, err := n.appendWatchEvents(nil, 1, stored, 6)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := vt.Marshal(&storev1.WatchMessage{Seq: 1, Revision: 6, Events: []*storev1.Event{
		stored[0],
		{Type: storev1.EventType_EVENT_TYPE_PUT, Revision: 6, Kv: &storev1.KeyValue{Key: key, Value: plain, CreateRevision: 6, ModRevision: 6}},
	}})
	if !bytes.Equal(got, want) {
		t.Fatalf("assembled %x\nwant %x", got, want)
	}
	for ev, b := range n.wire.cur {
		if bytes.Contains(b, plain) || ev.Kv.Key == key {
			t.Fatalf("the cache holds the secret's event %q", b)
		}
	}
	bad := bytes.Clone(sealed)
	bad[len(bad)-1] ^= 1
	stored[1].Kv.Value = bad
	if _, err := n.appendWatchEvents(nil, 2, stored, 6); err == nil || !strings.Contains(err.Error(), "k1") {
		t.Fatalf("an undecryptable value: err = %v", err)
	}
}

// TestWireCacheGenerations: past its bound the cache drops its oldest
// generation, and every encoding it returns, hit or miss, is the event's.
func TestWireCacheGenerations(t *testing.T) {
	var c wireCache
	events := testEvents(60)
	const limit = 2000
	for pass := range 3 {
		for i, e := range events {
			b, err := c.get(e, limit)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := vt.Marshal(e)
			if !bytes.Equal(b, want) {
				t.Fatalf("pass %d event %d: wrong encoding", pass, i)
			}
			if c.size > limit+len(want) {
				t.Fatalf("generation holds %d bytes, bound %d", c.size, limit)
			}
		}
	}
	if len(c.cur)+len(c.prev) >= len(events) {
		t.Fatalf("cache holds %d of %d events: nothing dropped", len(c.cur)+len(c.prev), len(events))
	}
	var off wireCache
	if _, err := off.get(events[0], 0); err != nil || off.cur != nil {
		t.Fatalf("limit 0 cached: %v %v", off.cur, err)
	}
}

// coalescingNode is a Node with just what coalesceWakes needs, running it.
func coalescingNode(t *testing.T, d time.Duration) *Node {
	n := &Node{fsm: newFSM(1000, 0, 10), cfg: Config{WatchCoalesce: d}}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	next := n.fsm.changes()
	n.goFunc(func() { n.coalesceWakes(next) })
	t.Cleanup(func() { n.cancel(); n.wg.Wait() })
	return n
}

// TestWatchWakeCoalesces: commits within WatchCoalesce of the first wake
// the streams once, not at each commit.
func TestWatchWakeCoalesces(t *testing.T) {
	n := coalescingNode(t, time.Hour)
	wake := n.watchWake()
	for i := range 5 {
		apply(t, n.fsm, put(fmt.Sprint("/k/", i), "v", ""))
	}
	select {
	case <-wake:
		t.Fatal("streams woken before the coalescing delay passed")
	default:
	}
	if n.watchWake() != wake {
		t.Fatal("a stream looking now waits on another wake-up than the commits'")
	}
}

// TestWatchWakeMissesNoChange: a stream that takes its wake channel
// before it scans is woken for every change after it, the first change
// after the replica starts included, and changes falling at various
// points of the coalescing goroutine's cycle. A lost wake-up fails this
// test; in a replica the watch heartbeat would only hide it as delay.
func TestWatchWakeMissesNoChange(t *testing.T) {
	n := coalescingNode(t, 50*time.Microsecond)
	for i := range 2000 {
		wake := n.watchWake()
		if i%3 == 0 {
			time.Sleep(time.Duration(i%7) * 20 * time.Microsecond)
		}
		apply(t, n.fsm, put("/k", fmt.Sprint(i), ""))
		select {
		case <-wake:
		case <-time.After(20 * time.Second):
			t.Fatalf("change %d woke no stream", i)
		}
	}
}

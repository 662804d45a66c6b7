package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/podflow/podflow/proto/storev1"
	"google.golang.org/protobuf/proto"
)

// memSink is a raft.SnapshotSink over a buffer.
type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

var logIndex uint64

func apply(t testing.TB, f *fsm, cmd *storev1.Command) *storev1.WriteResult {
	t.Helper()
	data, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	logIndex++
	return f.Apply(&raft.Log{Index: logIndex, Type: raft.LogCommand, Data: data}).(*storev1.WriteResult)
}

func put(key, val, idem string) *storev1.Command {
	return &storev1.Command{IdempotencyKey: idem, Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: key, Value: []byte(val)}}}
}

func snapshotBytes(t *testing.T, f *fsm) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := s.Persist(&sink); err != nil || sink.cancelled {
		t.Fatalf("persist: %v (cancelled %v)", err, sink.cancelled)
	}
	s.Release()
	return sink.Bytes()
}

// dump is the observable state of an fsm.
func dump(f *fsm) string {
	var b bytes.Buffer
	kvs, rev, _ := f.list("", "", 0)
	fmt.Fprintf(&b, "rev=%d compact=%d\n", rev, f.compactRev)
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%s=%q c=%d m=%d\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision)
	}
	events, _, _, _ := f.eventsAfter("", f.compactRev, 1<<30, 1<<30)
	for _, e := range events {
		fmt.Fprintf(&b, "event %v %s@%d\n", e.Type, e.Kv.Key, e.Revision)
	}
	for _, k := range f.dedupOrder[f.dedupHead:] {
		fmt.Fprintf(&b, "dedup %s=%d\n", k, f.dedup[k].Revision)
	}
	return b.String()
}

func TestSnapshotRestoreIdentical(t *testing.T) {
	f := newFSM(50, 0, 20)
	for i := range 100 {
		apply(t, f, put(fmt.Sprintf("/k/%03d", i%40), fmt.Sprint(i), fmt.Sprintf("w%d", i)))
		if i%7 == 0 {
			apply(t, f, &storev1.Command{IdempotencyKey: fmt.Sprintf("d%d", i), Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_DELETE, Key: fmt.Sprintf("/k/%03d", (i+3)%40)}}})
		}
	}
	want := dump(f)
	if f.compactRev == 0 {
		t.Fatal("history was never compacted; the test needs more writes")
	}
	snap := snapshotBytes(t, f)

	// A fresh replica restores to an identical state.
	g := newFSM(50, 0, 20)
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if got := dump(g); got != want {
		t.Fatalf("restored state differs:\n got %s\nwant %s", got, want)
	}

	// Restore discards all previous state.
	h := newFSM(50, 0, 20)
	apply(t, h, put("/other", "x", "other-write"))
	apply(t, h, put("/k/000", "overwritten", "w-stale"))
	if err := h.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if got := dump(h); got != want {
		t.Fatalf("restore over existing state differs:\n got %s\nwant %s", got, want)
	}
	// The idempotency window survives: a replayed write is not applied again
	// and gets its original result.
	rev := h.rev
	if r := apply(t, h, put("/k/001", "replayed", "w99")); !proto.Equal(r, f.dedup["w99"]) || h.rev != rev {
		t.Fatalf("replayed write = %v at rev %d, want the original %v at %d", r, h.rev, f.dedup["w99"], rev)
	}
	if kv, _ := h.get("/k/001"); kv != nil && string(kv.Value) == "replayed" {
		t.Fatal("replayed write changed the value")
	}
}

func TestDedupReturnsOriginalResult(t *testing.T) {
	f := newFSM(100, 0, 3)
	create := &storev1.Command{IdempotencyKey: "c1", Kind: storev1.WriteKind_WRITE_KIND_CREATE,
		Compares: []*storev1.Compare{{Key: "/a", ModRevision: 0}},
		Ops:      []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/a", Value: []byte("1")}}}
	first := apply(t, f, create)
	if first.Error != nil || first.Revision != 1 {
		t.Fatalf("first create = %v", first)
	}
	again := apply(t, f, create)
	if !proto.Equal(first, again) || f.rev != 1 {
		t.Fatalf("retry = %v (rev %d), want the original %v", again, f.rev, first)
	}
	// Once out of the bounded window, the key is forgotten: the same create
	// is evaluated anew and fails.
	for i := range 3 {
		apply(t, f, put("/b", "x", fmt.Sprint("p", i)))
	}
	if len(f.dedup) != 3 {
		t.Fatalf("dedup window holds %d entries, want 3", len(f.dedup))
	}
	if r := apply(t, f, create); r.Error.GetCode() != storev1.Code_CODE_ALREADY_EXISTS {
		t.Fatalf("create after the window = %v, want AlreadyExists", r)
	}
}

func TestCompactionBoundsHistory(t *testing.T) {
	f := newFSM(10, 0, 10)
	for i := range 200 {
		apply(t, f, put("/k", fmt.Sprint(i), fmt.Sprint(i)))
	}
	if len(f.history) > 10+10/8+1 {
		t.Fatalf("history holds %d events, want at most ~%d", len(f.history), 11)
	}
	if _, _, _, err := f.eventsAfter("", f.compactRev-1, 100, 1<<20); err == nil || fromWire(toWire(err)).(*Error).Code != storev1.Code_CODE_GONE {
		t.Fatalf("watch before the compacted revision: %v, want Gone", err)
	}
	events, covered, _, err := f.eventsAfter("", f.compactRev, 100, 1<<20)
	if err != nil || covered != 200 || events[len(events)-1].Revision != 200 || events[0].Revision != f.compactRev+1 {
		t.Fatalf("events after compact = %d events, covered %d, %v", len(events), covered, err)
	}
}

func TestErrorWireRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		is   error
		key  string
	}{
		{"sentinel", ErrNotFound, ErrNotFound, ""},
		{"keyed", compareError(storev1.WriteKind_WRITE_KIND_TXN, "/k", 3, 4), ErrConflict, "/k"},
		{"create", compareError(storev1.WriteKind_WRITE_KIND_CREATE, "/k", 0, 4), ErrAlreadyExists, "/k"},
		{"update missing", compareError(storev1.WriteKind_WRITE_KIND_UPDATE, "/k", 3, 0), ErrNotFound, "/k"},
		{"wrapped", fmt.Errorf("apply: %w", ErrIndeterminate), ErrIndeterminate, ""},
		{"uncoded", io.ErrUnexpectedEOF, ErrInternal, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromWire(toWire(tc.err))
			var e *Error
			if !errors.Is(got, tc.is) || !errors.As(got, &e) || e.Key != tc.key {
				t.Fatalf("round trip of %v = %v, want code of %v and key %q", tc.err, got, tc.is, tc.key)
			}
			for _, other := range []error{ErrNotFound, ErrAlreadyExists, ErrConflict, ErrUnavailable, ErrNotLeader, ErrGone, ErrIndeterminate, ErrInvalid, ErrInternal} {
				if other != tc.is && errors.Is(got, other) {
					t.Fatalf("%v also matches %v", got, other)
				}
			}
			if strings.Count(got.Error(), "(key") > 1 {
				t.Fatalf("key repeated in %q", got.Error())
			}
		})
	}
}

// TestHistoryBytes: the history is bounded by bytes as well as revisions,
// whole revisions at a time; sizes survive a snapshot.
func TestHistoryBytes(t *testing.T) {
	f := newFSM(1000, 4096, 10)
	val := strings.Repeat("v", 1000)
	for i := range 50 {
		apply(t, f, put(fmt.Sprintf("/k%d", i%5), val, fmt.Sprintf("i%d", i)))
	}
	if f.historySize > 4096+4096/8 || f.historySize == 0 {
		t.Fatalf("history holds %d bytes, bound 4096", f.historySize)
	}
	var sum int64
	for _, e := range f.history {
		sum += kvSize(e.Kv)
	}
	if sum != f.historySize || f.history[0].Revision != f.compactRev+1 {
		t.Fatalf("accounting: sum %d, counted %d; first event %d, compacted %d", sum, f.historySize, f.history[0].Revision, f.compactRev)
	}
	if _, _, _, err := f.eventsAfter("", 1, 10, 1<<20); !errors.Is(err, ErrGone) {
		t.Fatalf("watch from a revision dropped for size: %v", err)
	}
	if want := int64(5 * (3 + 1000)); f.liveSize != want {
		t.Fatalf("live size %d, want %d", f.liveSize, want)
	}
	g := newFSM(1000, 4096, 10)
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if g.size() != f.size() {
		t.Fatalf("restored size %d, want %d", g.size(), f.size())
	}
	apply(t, f, &storev1.Command{IdempotencyKey: "del", Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_DELETE, Key: "/k0"}}})
	if want := int64(4 * (3 + 1000)); f.liveSize != want {
		t.Fatalf("live size after a delete %d, want %d", f.liveSize, want)
	}
}

// TestStoredKeysAreOwn: the keys the state machine stores (the key space,
// its order, the events, the idempotency window, a failed compare's
// error) are its own strings, not views of the entry they were decoded
// from (decodeCommand aliases them): scribbling over an applied entry
// changes nothing stored, and no small write keeps its entry alive.
func TestStoredKeysAreOwn(t *testing.T) {
	f := newFSM(100, 0, 100)
	entry := func(cmd *storev1.Command) []byte {
		data, err := proto.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	applyData := func(data []byte) *storev1.WriteResult {
		logIndex++
		return f.Apply(&raft.Log{Index: logIndex, Type: raft.LogCommand, Data: data}).(*storev1.WriteResult)
	}
	create := entry(&storev1.Command{IdempotencyKey: "create", Compares: []*storev1.Compare{{Key: "/a", ModRevision: 0}},
		Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/a", Value: []byte("1")}, {Type: storev1.OpType_OP_TYPE_PUT, Key: "/b", Value: []byte("2")}}})
	update := entry(&storev1.Command{IdempotencyKey: "update", Compares: []*storev1.Compare{{Key: "/a", ModRevision: 1}},
		Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/a", Value: []byte("3")}, {Type: storev1.OpType_OP_TYPE_DELETE, Key: "/b"}}})
	stale := entry(&storev1.Command{IdempotencyKey: "stale", Kind: storev1.WriteKind_WRITE_KIND_UPDATE, Compares: []*storev1.Compare{{Key: "/a", ModRevision: 1}},
		Ops: []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: "/a", Value: []byte("4")}}})
	for _, data := range [][]byte{create, update, stale} {
		applyData(data)
	}
	before := dump(f)
	staleErr := f.dedup["stale"].Error.String()
	for _, data := range [][]byte{create, update, stale} {
		for i := range data {
			data[i] = '#'
		}
	}
	if after := dump(f); after != before {
		t.Fatalf("scribbling over the applied entries changed the state:\n%s\nwas\n%s", after, before)
	}
	if got := f.dedup["stale"].Error.String(); got != staleErr {
		t.Fatalf("a remembered error changed with its entry: %s, was %s", got, staleErr)
	}
	var keys []string
	f.keys.Ascend(func(k string) bool { keys = append(keys, k); return true })
	if fmt.Sprint(keys) != "[/a]" {
		t.Fatalf("ordered keys = %v, want [/a]", keys)
	}
}

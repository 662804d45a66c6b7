package objectstest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects/objectstest"
)

var ctx = context.Background()

// TestWrites: every write bumps the one revision, and each failed
// precondition is the error raftstore gives for it, naming the key.
func TestWrites(t *testing.T) {
	kv := objectstest.New()
	rev, err := kv.Create(ctx, "/a", []byte("1"))
	if err != nil || rev != 1 {
		t.Fatalf("Create /a = %d, %v; want revision 1", rev, err)
	}
	if _, err := kv.Create(ctx, "/b", []byte("1")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		write   func() (int64, error)
		wantRev int64
		wantErr error
	}{
		{"create of an existing key", func() (int64, error) { return kv.Create(ctx, "/a", nil) }, 0, raftstore.ErrAlreadyExists},
		{"update at a stale revision", func() (int64, error) { return kv.Update(ctx, "/a", nil, 2) }, 0, raftstore.ErrConflict},
		{"update of a missing key", func() (int64, error) { return kv.Update(ctx, "/x", nil, 1) }, 0, raftstore.ErrNotFound},
		{"update without a revision", func() (int64, error) { return kv.Update(ctx, "/a", nil, 0) }, 0, raftstore.ErrInvalid},
		{"update at the current revision", func() (int64, error) { return kv.Update(ctx, "/a", []byte("2"), 1) }, 3, nil},
		{"delete at a stale revision", func() (int64, error) { return kv.Delete(ctx, "/a", 1) }, 0, raftstore.ErrConflict},
		{"delete of a missing key", func() (int64, error) { return kv.Delete(ctx, "/x", 0) }, 0, raftstore.ErrNotFound},
		{"delete at any revision", func() (int64, error) { return kv.Delete(ctx, "/b", 0) }, 4, nil},
		{"create of an empty key", func() (int64, error) { return kv.Create(ctx, "", nil) }, 0, raftstore.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev, err := tt.write()
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if rev != tt.wantRev {
				t.Errorf("revision = %d, want %d", rev, tt.wantRev)
			}
			var e *raftstore.Error
			if tt.wantErr != nil && tt.wantErr != raftstore.ErrInvalid && (!errors.As(err, &e) || e.Key == "") {
				t.Errorf("error %v does not name its key", err)
			}
		})
	}
	got, err := kv.Get(ctx, "/a")
	if err != nil || string(got.Value) != "2" || got.CreateRevision != 1 || got.ModRevision != 3 {
		t.Errorf("Get /a = %+v, %v; want value 2 created at 1, modified at 3", got, err)
	}
	if _, err := kv.Get(ctx, "/b"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("Get of a deleted key: %v, want ErrNotFound", err)
	}
	got.Value[0] = 'x'
	if again, _ := kv.Get(ctx, "/a"); string(again.Value) != "2" {
		t.Error("a caller's change to a returned value changed the store")
	}
}

// TestTxn: a transaction applies all of its ops at one revision or, when
// a compare fails, none of them, and names the key that failed.
func TestTxn(t *testing.T) {
	kv := objectstest.New()
	if _, err := kv.Create(ctx, "/pods/p", []byte("p1")); err != nil {
		t.Fatal(err)
	}
	stale := raftstore.Txn{
		Compares: []raftstore.Compare{{Key: "/pods/p", ModRevision: 1}, {Key: "/allocs/n", ModRevision: 7}},
		Ops:      []raftstore.Op{{Type: raftstore.OpPut, Key: "/pods/p", Value: []byte("p2")}, {Type: raftstore.OpPut, Key: "/allocs/n", Value: []byte("a")}},
	}
	_, err := kv.Txn(ctx, stale)
	var e *raftstore.Error
	if !errors.Is(err, raftstore.ErrConflict) || !errors.As(err, &e) || e.Key != "/allocs/n" {
		t.Fatalf("Txn with a failing compare: %v, want ErrConflict on /allocs/n", err)
	}
	if got, _ := kv.Get(ctx, "/pods/p"); string(got.Value) != "p1" || kv.Revision() != 1 {
		t.Fatalf("a failed Txn wrote: /pods/p = %q at revision %d", got.Value, kv.Revision())
	}
	stale.Compares[1].ModRevision = 0 // absent
	rev, err := kv.Txn(ctx, stale)
	if err != nil || rev != 2 {
		t.Fatalf("Txn = %d, %v; want revision 2", rev, err)
	}
	for _, key := range []string{"/pods/p", "/allocs/n"} {
		if got, err := kv.Get(ctx, key); err != nil || got.ModRevision != 2 {
			t.Errorf("Get %s = %+v, %v; want it written at revision 2", key, got, err)
		}
	}
	rev, err = kv.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpDelete, Key: "/missing"}}})
	if err != nil || rev != 2 {
		t.Errorf("a Txn that changes nothing = %d, %v; want the current revision 2", rev, err)
	}
	kvs, lrev, err := kv.List(ctx, "/")
	if err != nil || lrev != 2 || len(kvs) != 2 || kvs[0].Key != "/allocs/n" || kvs[1].Key != "/pods/p" {
		t.Errorf("List / = %v at %d, %v; want both keys sorted at revision 2", kvs, lrev, err)
	}
}

func next(t *testing.T, w interface {
	Events() <-chan raftstore.WatchEvent
}) raftstore.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no watch event within 5s")
	}
	return raftstore.WatchEvent{}
}

// TestWatch: a watch from a revision replays what came after it under its
// prefix, then follows new writes, in revision order; Stop ends it with
// context.Canceled.
func TestWatch(t *testing.T) {
	kv := objectstest.New()
	kv.Create(ctx, "/a/1", []byte("x"))    // 1
	kv.Create(ctx, "/b/1", []byte("x"))    // 2
	kv.Update(ctx, "/a/1", []byte("y"), 1) // 3
	w, err := kv.Watch(ctx, "/a/", 1)
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Type != raftstore.EventPut || ev.Revision != 3 || string(ev.KV.Value) != "y" {
		t.Errorf("first event %v %d %q, want the PUT at 3", ev.Type, ev.Revision, ev.KV.Value)
	}
	kv.Create(ctx, "/b/2", nil) // 4, another prefix
	kv.Delete(ctx, "/a/1", 0)   // 5
	if ev := next(t, w); ev.Type != raftstore.EventDelete || ev.Revision != 5 || string(ev.KV.Value) != "y" {
		t.Errorf("second event %v %d %q, want the DELETE at 5 with the last value", ev.Type, ev.Revision, ev.KV.Value)
	}
	w.Stop()
	w.Stop() // idempotent
	if _, ok := <-w.Events(); ok {
		t.Error("events still open after Stop")
	}
	if !errors.Is(w.Err(), context.Canceled) {
		t.Errorf("Err after Stop = %v, want context.Canceled", w.Err())
	}
}

// TestWatchCompacted: a watch from before the compacted revision fails
// with ErrGone, as the real store's does, so an informer relists.
func TestWatchCompacted(t *testing.T) {
	kv := objectstest.New()
	for range 3 {
		kv.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: "/k", Value: []byte("v")}}})
	}
	kv.Compact(2)
	if _, err := kv.Watch(ctx, "/", 1); !errors.Is(err, raftstore.ErrGone) {
		t.Errorf("Watch from 1 after Compact(2): %v, want ErrGone", err)
	}
	w, err := kv.Watch(ctx, "/", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := next(t, w); ev.Revision != 3 {
		t.Errorf("Watch from 2 gave revision %d first, want 3", ev.Revision)
	}
}

// TestHook: an injected error is returned instead of doing the call.
func TestHook(t *testing.T) {
	kv := objectstest.New()
	kv.Hook(func(method, key string) error {
		if method == "Create" && key == "/down" {
			return raftstore.ErrUnavailable
		}
		return nil
	})
	if _, err := kv.Create(ctx, "/down", nil); !errors.Is(err, raftstore.ErrUnavailable) {
		t.Errorf("hooked Create: %v, want ErrUnavailable", err)
	}
	if _, err := kv.Get(ctx, "/down"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("the hooked Create wrote: Get = %v", err)
	}
	if _, err := kv.Create(ctx, "/up", nil); err != nil {
		t.Errorf("unhooked Create: %v", err)
	}

	// A hook may race the call it precedes with a concurrent writer.
	raced := false
	kv.Hook(func(method, key string) error {
		if method == "Update" && !raced {
			raced = true
			_, err := kv.Update(ctx, key, []byte("theirs"), 1)
			return err
		}
		return nil
	})
	if _, err := kv.Update(ctx, "/up", []byte("mine"), 1); !errors.Is(err, raftstore.ErrConflict) {
		t.Errorf("Update raced by the hook's writer: %v, want ErrConflict", err)
	}
	if got, _ := kv.Get(ctx, "/up"); string(got.Value) != "theirs" {
		t.Errorf("/up = %q, want the racing writer's", got.Value)
	}
}

package raftstore_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// TestCompareReadACL: a transaction's compares read their keys (existence,
// revision), so against real replicas a named writer whose ReadACL keeps it
// from Secrets cannot compare one — CODE_FORBIDDEN naming the key, nothing
// applied — while its compares of keys it may read go through.
func TestCompareReadACL(t *testing.T) {
	const secrets = "/secrets/"
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) {
		cfg.ReadACL = func(user, key string, prefix bool) bool {
			return user != "restricted" || !strings.HasPrefix(key, secrets) && !(prefix && strings.HasPrefix(secrets, key))
		}
	})
	ctx := testCtx(t)
	admin := c.Client(t)
	rev, err := admin.Create(ctx, secrets+"s", []byte("s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := raftstore.NewClient(c.Conn(t), raftstore.ClientConfig{User: "restricted"})
	if err != nil {
		t.Fatal(err)
	}
	put := raftstore.Op{Type: raftstore.OpPut, Key: "/pods/a", Value: []byte("a")}
	for name, cmp := range map[string]raftstore.Compare{
		"the secret exists":        {Key: secrets + "s", ModRevision: -1},
		"the secret is at its rev": {Key: secrets + "s", ModRevision: rev},
		"a secret does not exist":  {Key: secrets + "other", ModRevision: 0},
	} {
		_, err := r.Txn(ctx, raftstore.Txn{Compares: []raftstore.Compare{cmp}, Ops: []raftstore.Op{put}})
		var se *raftstore.Error
		if !errors.Is(err, raftstore.ErrForbidden) || !errors.As(err, &se) || se.Key != cmp.Key {
			t.Errorf("compare %s: %v, want ErrForbidden naming %s", name, err, cmp.Key)
		}
	}
	if _, err := admin.Get(ctx, "/pods/a"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("/pods/a after the refused transactions: %v, want not found", err)
	}
	if _, err := r.Txn(ctx, raftstore.Txn{Compares: []raftstore.Compare{{Key: "/pods/a", ModRevision: 0}}, Ops: []raftstore.Op{put}}); err != nil {
		t.Errorf("a compare of a key it may read: %v", err)
	}
	if _, err := admin.Txn(ctx, raftstore.Txn{Compares: []raftstore.Compare{{Key: secrets + "s", ModRevision: -1}}, Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: "/pods/b"}}}); err != nil {
		t.Errorf("the unnamed writer's compare: %v", err)
	}
}

// TestReadFilter: with a ReadFilter that follows a relation in the stored
// data (a reader sees /data/<x> only while /grant/<reader>/<x> exists),
// against real replicas a named reader's get of a key it may not see is
// CODE_FORBIDDEN, its lists (limited ones too) and watches leave such keys
// out, and its compares of them are refused; the grant, once written,
// opens them; the unnamed reader sees everything.
func TestReadFilter(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) {
		cfg.ReadFilter = func(user, key string, _ []byte, st raftstore.State) bool {
			x, ok := strings.CutPrefix(key, "/data/")
			if !ok {
				return true
			}
			_, granted := st.Get("/grant/" + user + "/" + x)
			return granted
		}
	})
	ctx := testCtx(t)
	admin := c.Client(t)
	var crev int64
	for _, k := range []string{"/data/a", "/data/b", "/data/c", "/grant/r/b", "/other"} {
		rev, err := admin.Create(ctx, k, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if k == "/data/c" {
			crev = rev
		}
	}
	r, err := raftstore.NewClient(c.Conn(t), raftstore.ClientConfig{User: "r"})
	if err != nil {
		t.Fatal(err)
	}
	keys := func(kvs []*raftstore.KV) []string {
		var out []string
		for _, kv := range kvs {
			out = append(out, kv.Key)
		}
		return out
	}
	if _, err := r.Get(ctx, "/data/a"); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("get of an ungranted key: %v, want ErrForbidden", err)
	}
	if _, err := r.Get(ctx, "/data/a", raftstore.Stale()); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("stale get of an ungranted key: %v, want ErrForbidden", err)
	}
	if kv, err := r.Get(ctx, "/data/b"); err != nil || string(kv.Value) != "/data/b" {
		t.Errorf("get of a granted key: %v", err)
	}
	if kvs, _, err := r.List(ctx, "/data/"); err != nil || !slices.Equal(keys(kvs), []string{"/data/b"}) {
		t.Errorf("list: %v (%v), want the granted key only", keys(kvs), err)
	}
	if kvs, _, err := r.List(ctx, "/", raftstore.WithLimit(3)); err != nil || !slices.Equal(keys(kvs), []string{"/data/b", "/grant/r/b", "/other"}) {
		t.Errorf("limited list: %v (%v), want a full page of allowed keys", keys(kvs), err)
	}
	_, err = r.Txn(ctx, raftstore.Txn{Compares: []raftstore.Compare{{Key: "/data/c", ModRevision: -1}}, Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: "/x"}}})
	if !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("compare of an ungranted key: %v, want ErrForbidden", err)
	}
	w, err := r.Watch(ctx, "/data/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := admin.Create(ctx, "/grant/r/c", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Create(ctx, "/data/d", nil); err != nil { // never granted
		t.Fatal(err)
	}
	if _, err := admin.Update(ctx, "/data/c", []byte("c2"), crev); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) < 2 {
		select {
		case ev := <-w.Events():
			seen = append(seen, ev.KV.Key)
		case <-ctx.Done():
			t.Fatalf("the watch saw %v", seen)
		}
	}
	// /data/b from the start (granted), /data/c once granted; never a nor d.
	if !slices.Equal(seen, []string{"/data/b", "/data/c"}) && !slices.Equal(seen, []string{"/data/c", "/data/b"}) {
		t.Errorf("the watch saw %v, want /data/b and /data/c only", seen)
	}
	if kvs, _, err := admin.List(ctx, "/data/"); err != nil || len(kvs) != 4 {
		t.Errorf("the unnamed reader lists %d keys (%v), want 4", len(kvs), err)
	}
}

package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCRUD(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)

	const key = "/registry/pods/default/web"
	if _, err := cl.Get(ctx, key); !errors.Is(err, raftstore.ErrNotFound) {
		t.Fatalf("Get missing: got %v, want ErrNotFound", err)
	}
	r1, err := cl.Create(ctx, key, []byte("v1"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := cl.Create(ctx, key, []byte("again")); !errors.Is(err, raftstore.ErrAlreadyExists) {
		t.Fatalf("Create existing: got %v, want ErrAlreadyExists", err)
	}
	kv, err := cl.Get(ctx, key)
	if err != nil || string(kv.Value) != "v1" || kv.CreateRevision != r1 || kv.ModRevision != r1 {
		t.Fatalf("Get = %+v, %v; want v1 at %d", kv, err, r1)
	}
	r2, err := cl.Update(ctx, key, []byte("v2"), r1)
	if err != nil || r2 <= r1 {
		t.Fatalf("Update = %d, %v; want a revision > %d", r2, err, r1)
	}
	_, err = cl.Update(ctx, key, []byte("stale"), r1)
	var se *raftstore.Error
	if !errors.Is(err, raftstore.ErrConflict) || !errors.As(err, &se) || se.Key != key {
		t.Fatalf("stale Update: got %v, want ErrConflict naming %q", err, key)
	}
	if _, err := cl.Update(ctx, "/registry/pods/default/none", []byte("x"), 1); !errors.Is(err, raftstore.ErrNotFound) {
		t.Fatalf("Update missing: got %v, want ErrNotFound", err)
	}
	c.WaitForReplication(t) // a stale read is served by any replica, a follower too
	kv, err = cl.Get(ctx, key, raftstore.Stale())
	if err != nil || kv.CreateRevision != r1 || kv.ModRevision < r1 {
		t.Fatalf("stale Get = %+v, %v", kv, err)
	}
	if _, err := cl.Delete(ctx, key, r1); !errors.Is(err, raftstore.ErrConflict) {
		t.Fatalf("Delete stale: got %v, want ErrConflict", err)
	}
	r3, err := cl.Delete(ctx, key, r2)
	if err != nil || r3 <= r2 {
		t.Fatalf("Delete = %d, %v", r3, err)
	}
	if _, err := cl.Delete(ctx, key, 0); !errors.Is(err, raftstore.ErrNotFound) {
		t.Fatalf("Delete missing: got %v, want ErrNotFound", err)
	}
	if _, err := cl.Create(ctx, "", nil); !errors.Is(err, raftstore.ErrInvalid) {
		t.Fatalf("Create empty key: got %v, want ErrInvalid", err)
	}
	r4, err := cl.Create(ctx, key, []byte("v3"))
	if err != nil {
		t.Fatal(err)
	}
	if kv, _ := cl.Get(ctx, key); kv.CreateRevision != r4 {
		t.Fatalf("re-created key has CreateRevision %d, want %d", kv.CreateRevision, r4)
	}
}

func TestListAndPagination(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)
	for i := range 25 {
		if _, err := cl.Create(ctx, fmt.Sprintf("/registry/pods/ns1/p%02d", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	last, err := cl.Create(ctx, "/registry/pods/ns2/other", nil)
	if err != nil {
		t.Fatal(err)
	}
	kvs, rev, err := cl.List(ctx, "/registry/pods/ns1/")
	if err != nil || len(kvs) != 25 || rev != last {
		t.Fatalf("List = %d keys at %d, %v; want 25 at %d", len(kvs), rev, err, last)
	}
	for i, kv := range kvs {
		if want := fmt.Sprintf("/registry/pods/ns1/p%02d", i); kv.Key != want {
			t.Fatalf("key %d = %q, want %q", i, kv.Key, want)
		}
	}
	// Stale pages are served by any replica: wait until every replica has
	// applied the writes, or a lagging follower serves a short last page.
	c.WaitForReplication(t)
	var paged []string
	after := ""
	for {
		page, _, err := cl.List(ctx, "/registry/pods/ns1/", raftstore.WithLimit(10), raftstore.WithContinue(after), raftstore.Stale())
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 10 {
			t.Fatalf("page of %d keys with limit 10", len(page))
		}
		for _, kv := range page {
			paged = append(paged, kv.Key)
		}
		if len(page) < 10 {
			break
		}
		after = page[len(page)-1].Key
	}
	if len(paged) != 25 || paged[24] != "/registry/pods/ns1/p24" {
		t.Fatalf("paged list = %v", paged)
	}
}

func TestTxn(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3)
	cl := c.Client(t)
	ctx := testCtx(t)
	pod, node := "/registry/pods/default/p", "/registry/allocations/n1"
	rp, _ := cl.Create(ctx, pod, []byte("unbound"))
	rn, _ := cl.Create(ctx, node, []byte("cpu=0"))

	rev, err := cl.Txn(ctx, raftstore.Txn{
		Compares: []raftstore.Compare{{Key: pod, ModRevision: rp}, {Key: node, ModRevision: rn}, {Key: "/absent", ModRevision: 0}},
		Ops:      []raftstore.Op{{Type: raftstore.OpPut, Key: pod, Value: []byte("bound")}, {Type: raftstore.OpPut, Key: node, Value: []byte("cpu=1")}, {Type: raftstore.OpDelete, Key: "/absent"}},
	})
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	for _, k := range []string{pod, node} {
		if kv, err := cl.Get(ctx, k); err != nil || kv.ModRevision != rev {
			t.Fatalf("%s = %+v, %v; want ModRevision %d (one revision for the txn)", k, kv, err, rev)
		}
	}
	// A failing compare applies nothing and names the key.
	_, err = cl.Txn(ctx, raftstore.Txn{
		Compares: []raftstore.Compare{{Key: pod, ModRevision: -1}, {Key: node, ModRevision: rn}},
		Ops:      []raftstore.Op{{Type: raftstore.OpDelete, Key: pod}},
	})
	var se *raftstore.Error
	if !errors.Is(err, raftstore.ErrConflict) || !errors.As(err, &se) || se.Key != node {
		t.Fatalf("Txn with a stale compare: got %v, want ErrConflict naming %q", err, node)
	}
	if _, err := cl.Get(ctx, pod); err != nil {
		t.Fatalf("pod deleted by a failed txn: %v", err)
	}
	// Only no-op deletes: succeeds without a new revision.
	r2, err := cl.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpDelete, Key: "/nothing"}}})
	if err != nil || r2 != rev {
		t.Fatalf("no-op txn = %d, %v; want %d", r2, err, rev)
	}
	if _, err := cl.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: pod}, {Type: raftstore.OpDelete, Key: pod}}}); !errors.Is(err, raftstore.ErrInvalid) {
		t.Fatalf("txn touching a key twice: got %v, want ErrInvalid", err)
	}
}

// TestWriteACL: a named writer writes only the keys the store's WriteACL
// allows it: a write or transaction touching any other key is refused
// whole with CODE_FORBIDDEN naming the key, and nothing of it is applied;
// an unnamed (admin) writer is not checked.
func TestWriteACL(t *testing.T) {
	acl := func(writer, key string) bool {
		return writer == "pods" && strings.HasPrefix(key, "/pods/")
	}
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) { cfg.WriteACL = acl })
	ctx := testCtx(t)
	pods, err := raftstore.NewClient(c.Conn(t), raftstore.ClientConfig{User: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	admin := c.Client(t)
	if _, err := pods.Create(ctx, "/pods/a", []byte("a")); err != nil {
		t.Fatalf("an allowed write: %v", err)
	}
	_, err = pods.Create(ctx, "/secrets/s", []byte("s"))
	var se *raftstore.Error
	if !errors.Is(err, raftstore.ErrForbidden) || !errors.As(err, &se) || se.Key != "/secrets/s" {
		t.Fatalf("a write outside the ACL: %v, want ErrForbidden naming /secrets/s", err)
	}
	_, err = pods.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{
		{Type: raftstore.OpPut, Key: "/pods/b", Value: []byte("b")},
		{Type: raftstore.OpPut, Key: "/rbac/admin", Value: []byte("me")},
	}})
	if !errors.Is(err, raftstore.ErrForbidden) {
		t.Fatalf("a transaction with one key outside the ACL: %v, want ErrForbidden", err)
	}
	for _, k := range []string{"/pods/b", "/rbac/admin", "/secrets/s"} {
		if _, err := admin.Get(ctx, k); !errors.Is(err, raftstore.ErrNotFound) {
			t.Errorf("%s after the refused writes: %v, want not found", k, err)
		}
	}
	other, err := raftstore.NewClient(c.Conn(t), raftstore.ClientConfig{User: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(ctx, "/pods/c", []byte("c")); !errors.Is(err, raftstore.ErrForbidden) {
		t.Errorf("another writer on /pods/: %v, want ErrForbidden", err)
	}
	if _, err := admin.Create(ctx, "/secrets/s", []byte("s")); err != nil {
		t.Errorf("the unnamed writer: %v", err)
	}
	// Reads are not the ACL's business.
	if kv, err := pods.Get(ctx, "/secrets/s"); err != nil || string(kv.Value) != "s" {
		t.Errorf("read by a named writer: %v", err)
	}
}

// TestReadACL: a named reader reads, lists and watches only what the
// store's ReadACL allows — on the leader and on every replica — and a
// list or watch of a prefix that would include a forbidden key is refused
// whole; an unnamed (admin) reader is not checked.
func TestReadACL(t *testing.T) {
	const secrets = "/secrets/"
	acl := func(user, key string, prefix bool) bool {
		if user != "restricted" {
			return true
		}
		return !strings.HasPrefix(key, secrets) && !(prefix && strings.HasPrefix(secrets, key))
	}
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) { cfg.ReadACL = acl })
	ctx := testCtx(t)
	admin := c.Client(t)
	for _, k := range []string{"/pods/a", "/secrets/s"} {
		if _, err := admin.Create(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := raftstore.NewClient(c.Conn(t), raftstore.ClientConfig{User: "restricted"})
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := r.Get(ctx, "/pods/a"); err != nil || string(kv.Value) != "/pods/a" {
		t.Errorf("an allowed read: %v", err)
	}
	for name, read := range map[string]func() error{
		"get a secret":        func() error { _, err := r.Get(ctx, "/secrets/s"); return err },
		"stale get a secret":  func() error { _, err := r.Get(ctx, "/secrets/s", raftstore.Stale()); return err },
		"list the secrets":    func() error { _, _, err := r.List(ctx, secrets); return err },
		"list everything":     func() error { _, _, err := r.List(ctx, "/"); return err },
		"watch the secrets":   func() error { _, err := r.Watch(ctx, secrets, 0); return err },
		"watch everything":    func() error { _, err := r.Watch(ctx, "/", 0); return err },
		"stale list a secret": func() error { _, _, err := r.List(ctx, "/secrets/s", raftstore.Stale()); return err },
	} {
		if err := read(); !errors.Is(err, raftstore.ErrForbidden) {
			t.Errorf("%s: %v, want ErrForbidden", name, err)
		}
	}
	c.WaitForReplication(t) // a stale list is served by any replica
	if kvs, _, err := r.List(ctx, "/pods/", raftstore.Stale()); err != nil || len(kvs) != 1 {
		t.Errorf("an allowed stale list: %d keys, %v", len(kvs), err)
	}
	w, err := r.Watch(ctx, "/pods/", 0)
	if err != nil {
		t.Fatalf("an allowed watch: %v", err)
	}
	defer w.Stop()
	select {
	case ev := <-w.Events():
		if ev.KV.Key != "/pods/a" {
			t.Errorf("the allowed watch saw %q", ev.KV.Key)
		}
	case <-ctx.Done():
		t.Fatal("the allowed watch saw nothing")
	}
	if kvs, _, err := admin.List(ctx, "/"); err != nil || len(kvs) != 2 {
		t.Errorf("the unnamed reader lists %d keys (%v), want 2", len(kvs), err)
	}
}

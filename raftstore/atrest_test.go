package raftstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// syncBuffer is a bytes.Buffer safe for a replica's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// openToOthers lists every path under root (root excluded) that a group or
// other user may read, write or enter.
func openToOthers(t *testing.T, root string) []string {
	t.Helper()
	var open []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			open = append(open, fmt.Sprintf("%s %04o", path, info.Mode().Perm()))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return open
}

// TestDataDirOwnerOnly: after a 3-replica cluster wrote, snapshotted and
// compacted its log, nothing in any replica's data directory — WAL
// segments, its meta database, snapshots, LOCK — is open to group or other
// users.
func TestDataDirOwnerOnly(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) { cfg.TrailingLogs = 16 })
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 50 {
		if _, err := cl.Create(ctx, fmt.Sprintf("/registry/configmaps/default/c%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitForReplication(t)
	for _, i := range c.Live() {
		if err := c.Node(i).Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	var files int
	_ = filepath.WalkDir(c.Dir(), func(_ string, d fs.DirEntry, _ error) error {
		if d != nil && !d.IsDir() {
			files++
		}
		return nil
	})
	if files < 3*4 { // LOCK, a segment, the meta database, a snapshot's files
		t.Fatalf("%d files under %s: the walk checks nothing", files, c.Dir())
	}
	if open := openToOthers(t, c.Dir()); len(open) > 0 {
		t.Fatalf("open to other users after a run:\n%s", strings.Join(open, "\n"))
	}
}

// TestDataDirRepairedAtStart: a data directory left 0755 with a 0644 file
// and a 0755 snapshots directory in it (as older releases wrote them) is
// made owner-only at start, each path reported once; a path in it owned by
// another uid is refused with ErrDataDirOwner.
func TestDataDirRepairedAtStart(t *testing.T) {
	_, nc := startNATS(t)
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(filepath.Join(dir, "snapshots"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "snapshots")} {
		if err := os.Chmod(p, 0o755); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	stray := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(stray, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(stray, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	cfg := soloConfig(dir, freeLoopback(t), nc, true)
	cfg.NoSync, cfg.LogOutput, cfg.LogLevel = true, &logs, "info"
	node := startSolo(t, cfg)
	if err := node.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]fs.FileMode{dir: 0o700, filepath.Join(dir, "snapshots"): 0o700, stray: 0o600} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o after start, want %04o", p, got, want)
		}
		if n := strings.Count(logs.String(), `path=`+p+` `); n != 1 {
			t.Errorf("%s reported %d times, want once; log:\n%s", p, n, logs.String())
		}
	}
	if open := openToOthers(t, dir); len(open) > 0 {
		t.Fatalf("open to other users:\n%s", strings.Join(open, "\n"))
	}

	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another uid")
	}
	if err := os.Chown(stray, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	second, err := raftstore.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := second.Start(ctx); !errors.Is(err, raftstore.ErrDataDirOwner) || !strings.Contains(err.Error(), stray) {
		t.Fatalf("start on a data dir holding another uid's file: %v, want ErrDataDirOwner naming %s", err, stray)
	}
}

// encConfig is an EncryptionConfiguration of secrets with the given
// providers (each "secretbox:<name>:<base64 key>", "aesgcm:<name>:<base64
// key>" or "identity").
func encConfig(t *testing.T, providers ...string) *raftstore.Encryption {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n")
	for _, p := range providers {
		if p == "identity" {
			b.WriteString("  - identity: {}\n")
			continue
		}
		kind, rest, _ := strings.Cut(p, ":")
		name, secret, _ := strings.Cut(rest, ":")
		fmt.Fprintf(&b, "  - %s:\n      keys:\n      - name: %s\n        secret: %s\n", kind, name, secret)
	}
	e, err := raftstore.ParseEncryptionConfig([]byte(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return e
}

func newKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}

// filesHolding lists the files under root whose bytes contain needle.
func filesHolding(t *testing.T, root string, needle []byte) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, needle) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSecretsEncryptedAtRest writes a Secret with a known value through the
// store, forces a snapshot on every replica, and looks for the value in
// every file of every data directory: with encryption it is in none (the
// raft log, the snapshots and the meta database hold ciphertext with
// kube-apiserver's prefix), while a ConfigMap's value written beside it,
// not covered, is found (the search works); reads, stale reads, lists and
// watches return the value. Without encryption (the control) the Secret's
// value is on disk.
func TestSecretsEncryptedAtRest(t *testing.T) {
	for _, encrypted := range []bool{true, false} {
		t.Run(fmt.Sprint("encrypted=", encrypted), func(t *testing.T) {
			// Small log segments: the search below reads every file
			// whole, and each replica's first segment is preallocated
			// (64 MiB by default).
			opts := []raftstoretest.Option{func(c *raftstore.Config) { c.LogSegmentBytes = 1 << 20 }}
			if encrypted {
				e := encConfig(t, "secretbox:key1:"+newKey(t), "identity")
				opts = append(opts, func(c *raftstore.Config) { c.Encryption = e })
			}
			c := raftstoretest.MakeCluster(t, 3, opts...)
			cl := c.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			secret := []byte("password=" + hex.EncodeToString(randomBytes(t, 16)))
			plain := []byte("colour=" + hex.EncodeToString(randomBytes(t, 16)))
			w, err := cl.Watch(ctx, "/registry/secrets/", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			const key = "/registry/secrets/default/db"
			if _, err := cl.Create(ctx, key, secret); err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Create(ctx, "/registry/configmaps/default/cfg", plain); err != nil {
				t.Fatal(err)
			}
			c.WaitForReplication(t)
			for _, i := range c.Live() {
				if err := c.Node(i).Snapshot(); err != nil {
					t.Fatal(err)
				}
			}

			if kv, err := cl.Get(ctx, key); err != nil || !bytes.Equal(kv.Value, secret) {
				t.Fatalf("Get = %v, %v; want the value written", kv, err)
			}
			if kv, err := cl.Get(ctx, key, raftstore.Stale()); err != nil || !bytes.Equal(kv.Value, secret) {
				t.Fatalf("stale Get = %v, %v; want the value written", kv, err)
			}
			if kvs, _, err := cl.List(ctx, "/registry/secrets/"); err != nil || len(kvs) != 1 || !bytes.Equal(kvs[0].Value, secret) {
				t.Fatalf("List = %v, %v; want the value written", kvs, err)
			}
			select {
			case ev := <-w.Events():
				if !bytes.Equal(ev.KV.Value, secret) {
					t.Fatalf("watch event value %q, want %q", ev.KV.Value, secret)
				}
			case <-ctx.Done():
				t.Fatal("no watch event")
			}

			if found := filesHolding(t, c.Dir(), plain); len(found) == 0 {
				t.Fatalf("the ConfigMap's value is in no file under %s: the search finds nothing", c.Dir())
			}
			found := filesHolding(t, c.Dir(), secret)
			sealed := filesHolding(t, c.Dir(), []byte("k8s:enc:secretbox:v1:key1:"))
			if encrypted {
				if len(found) > 0 {
					t.Fatalf("the Secret's value is on disk in clear:\n%s", strings.Join(found, "\n"))
				}
				if len(sealed) == 0 {
					t.Fatal("no file holds kube-apiserver's secretbox prefix")
				}
				var snap bool
				for _, f := range sealed {
					snap = snap || strings.HasSuffix(f, "state.bin")
				}
				if !snap {
					t.Fatalf("no snapshot holds the sealed Secret: %v", sealed)
				}
				return
			}
			if len(found) == 0 {
				t.Fatal("without encryption the Secret's value is in no file: the search proves nothing")
			}
		})
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEncryptionKeyRotation rotates a replica's key as kube-apiserver's
// documentation says: values written with key1 read after key2 (AES-GCM)
// is added first; RewriteEncrypted reseals each of them once; with key1
// dropped every value still reads; and with only a key3 the store answers
// a read of a key2 value with ErrInternal naming key2, never ciphertext.
func TestEncryptionKeyRotation(t *testing.T) {
	k1, k2, k3 := "secretbox:key1:"+newKey(t), "aesgcm:key2:"+newKey(t), "secretbox:key3:"+newKey(t)
	c := raftstoretest.MakeCluster(t, 1, func(cfg *raftstore.Config) { cfg.Encryption = encConfig(t, k1) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	restart := func(providers ...string) *raftstore.Client {
		t.Helper()
		c.Kill(t, 0)
		e := encConfig(t, providers...)
		c.Reconfigure(t, 0, func(cfg *raftstore.Config) { cfg.Encryption = e })
		c.Restart(t, 0)
		c.Leader(t)
		return c.Client(t)
	}
	values := map[string][]byte{}
	put := func(cl *raftstore.Client, name string) {
		t.Helper()
		key, v := "/registry/secrets/default/"+name, []byte("token-"+name)
		if _, err := cl.Create(ctx, key, v); err != nil {
			t.Fatal(err)
		}
		values[key] = v
	}
	check := func(cl *raftstore.Client, when string) {
		t.Helper()
		kvs, _, err := cl.List(ctx, "/registry/secrets/")
		if err != nil {
			t.Fatalf("%s: list: %v", when, err)
		}
		if len(kvs) != len(values) {
			t.Fatalf("%s: listed %d secrets, want %d", when, len(kvs), len(values))
		}
		for _, kv := range kvs {
			if !bytes.Equal(kv.Value, values[kv.Key]) {
				t.Fatalf("%s: %s = %q, want %q", when, kv.Key, kv.Value, values[kv.Key])
			}
		}
	}
	cl := c.Client(t)
	put(cl, "a")
	put(cl, "b")

	cl = restart(k2, k1) // key2 writes, key1 still reads
	check(cl, "key2 added first")
	put(cl, "c")
	n, err := cl.RewriteEncrypted(ctx)
	if err != nil || n != 2 {
		t.Fatalf("RewriteEncrypted = %d, %v; want the 2 values sealed with key1", n, err)
	}
	if n, err := cl.RewriteEncrypted(ctx); err != nil || n != 0 {
		t.Fatalf("second RewriteEncrypted = %d, %v; want nothing left to rewrite", n, err)
	}
	check(cl, "after the rewrite")

	cl = restart(k2) // key1 dropped
	check(cl, "key1 dropped")

	cl = restart(k3) // a configuration without the key the values are sealed with
	_, err = cl.Get(ctx, "/registry/secrets/default/a")
	if !errors.Is(err, raftstore.ErrInternal) || !strings.Contains(err.Error(), "aesgcm:v1:key2") || !strings.Contains(err.Error(), "does not list") {
		t.Fatalf("Get of a value sealed with a key not configured: %v, want ErrInternal naming aesgcm:v1:key2", err)
	}
	if _, _, err := cl.List(ctx, "/registry/secrets/"); !errors.Is(err, raftstore.ErrInternal) {
		t.Fatalf("List with a value sealed with a key not configured: %v, want ErrInternal", err)
	}
}

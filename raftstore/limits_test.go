package raftstore_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// TestMaxRequestBytes: a write larger than MaxRequestBytes, or than the
// bus carries, is refused at once with ErrTooLarge naming the limit; the
// store goes on serving and keeps what it had.
func TestMaxRequestBytes(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) { cfg.MaxRequestBytes = 64 << 10 })
	cl := c.Client(t)
	ctx := testCtx(t)
	if _, err := cl.Create(ctx, "/registry/configmaps/default/kept", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		size       int
	}{
		{"past MaxRequestBytes", "MaxRequestBytes 65536", 100 << 10},
		{"past the bus's max payload", "more than the bus carries", 2 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := cl.Create(ctx, "/registry/configmaps/default/big", make([]byte, tc.size))
			if !errors.Is(err, raftstore.ErrTooLarge) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrTooLarge naming %q", err, tc.want)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("refusal took %s", d)
			}
		})
	}
	if _, err := cl.Get(ctx, "/registry/configmaps/default/big"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Fatalf("refused value stored: %v", err)
	}
	if kv, err := cl.Get(ctx, "/registry/configmaps/default/kept"); err != nil || string(kv.Value) != "v" {
		t.Fatalf("earlier value: %v %v", kv, err)
	}
	if _, err := cl.Create(ctx, "/registry/configmaps/default/small", make([]byte, 60<<10)); err != nil {
		t.Fatalf("a write within the limit: %v", err)
	}
}

// TestQuotaBackendBytes: at the quota, writes that add data are refused
// with ErrNoSpace and the NOSPACE alarm is raised, while reads and
// deletes work; deletes free the space and the alarm clears.
func TestQuotaBackendBytes(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) {
		cfg.QuotaBackendBytes, cfg.MaxRequestBytes, cfg.HistoryBytes = 256<<10, 64<<10, 32<<10
	})
	cl := c.Client(t)
	ctx := testCtx(t)
	val := make([]byte, 32<<10)
	var stored []string
	var err error
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("/registry/secrets/default/s%d", i)
		if _, err = cl.Create(ctx, key, val); err != nil {
			break
		}
		stored = append(stored, key)
	}
	if !errors.Is(err, raftstore.ErrNoSpace) || !strings.Contains(err.Error(), "QuotaBackendBytes") || !strings.Contains(err.Error(), "database space exceeded") {
		t.Fatalf("past the quota: %v", err)
	}
	if len(stored) < 4 {
		t.Fatalf("only %d writes fitted", len(stored))
	}
	alarmed := func() bool {
		st, err := cl.Status(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.State == "Leader" {
				return slices.Contains(s.Alarms, raftstore.AlarmNoSpace) && s.QuotaBytes == 256<<10 && s.SizeBytes > 0
			}
		}
		return false
	}
	if !alarmed() {
		t.Fatal("no NOSPACE alarm in the leader's status")
	}
	// Reads work; every accepted write is there.
	for _, k := range stored {
		if kv, err := cl.Get(ctx, k); err != nil || len(kv.Value) != len(val) {
			t.Fatalf("read %s at the quota: %v", k, err)
		}
	}
	// Deletes work and free the space.
	for _, k := range stored[:len(stored)/2] {
		kv, err := cl.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Delete(ctx, k, kv.ModRevision); err != nil {
			t.Fatalf("delete %s at the quota: %v", k, err)
		}
	}
	if _, err := cl.Create(ctx, "/registry/secrets/default/after", val); err != nil {
		t.Fatalf("a write after deletes freed space: %v", err)
	}
	if alarmed() {
		t.Fatal("NOSPACE alarm still raised after space was freed")
	}
}

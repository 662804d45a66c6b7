package raftstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// TestListAnySize lists 20,000 keys holding 25 MiB of values (100 of
// 256 KiB and 19,900 small ones) — 25 times the bus's max payload (NATS's
// default 1 MiB here; podflow's bus takes 8 MiB, and 100 ConfigMaps of
// 1 MiB made the same ratio) — linearizable and stale, while a writer
// keeps adding keys under the same prefix: every list returns the key
// space at one revision, whole (each key written at or before it, none
// after), in key order, each value intact. Before lists were chunked the
// answer was one message past the bus's limit, and the reader waited for
// nothing.
func TestListAnySize(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1, func(cfg *raftstore.Config) {
		cfg.HistoryBytes = 16 << 20 // the values need not stay in the watch history too
		cfg.SnapshotThreshold = 1 << 20
	})
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const prefix = "/registry/configmaps/big/"
	const large, total = 100, 20_000
	big := make([]byte, 256<<10)
	for i := range big {
		big[i] = byte(i*7 + i>>11)
	}
	sizes := map[string]int{}
	var wg sync.WaitGroup
	const writers = 16 // each create waits on a raft commit: many at once share one
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += writers {
				key, v := fmt.Sprintf("%sc%05d", prefix, i), []byte(fmt.Sprintf("small value %d", i))
				if i%(total/large) == 0 {
					v = big
				}
				if _, err := cl.Create(ctx, key, v); err != nil {
					errs <- fmt.Errorf("create %s: %w", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range total {
		sizes[fmt.Sprintf("%sc%05d", prefix, i)] = len(fmt.Sprintf("small value %d", i))
		if i%(total/large) == 0 {
			sizes[fmt.Sprintf("%sc%05d", prefix, i)] = len(big)
		}
	}

	// Writes go on during the lists: each list must stop at its revision.
	var mu sync.Mutex
	late := map[string]int64{}
	wctx, stopWriter := context.WithCancel(ctx)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for i := 0; wctx.Err() == nil; i++ {
			key := fmt.Sprintf("%sz-late-%05d", prefix, i)
			rev, err := cl.Create(wctx, key, []byte("late"))
			if err != nil {
				return
			}
			mu.Lock()
			late[key] = rev
			mu.Unlock()
		}
	}()
	defer func() { stopWriter(); <-writerDone }()

	for _, tc := range []struct {
		name string
		opts []raftstore.ReadOption
	}{{"linearizable", nil}, {"stale", []raftstore.ReadOption{raftstore.Stale()}}} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			kvs, rev, err := cl.List(ctx, prefix, tc.opts...)
			if err != nil {
				t.Fatalf("List of %d keys: %v", total, err)
			}
			var bytes int
			for i, kv := range kvs {
				bytes += len(kv.Value)
				if i > 0 && kvs[i-1].Key >= kv.Key {
					t.Fatalf("keys out of order: %s before %s", kvs[i-1].Key, kv.Key)
				}
				if kv.ModRevision > rev {
					t.Fatalf("%s at revision %d in a list at revision %d", kv.Key, kv.ModRevision, rev)
				}
				if want, ok := sizes[kv.Key]; ok && len(kv.Value) != want {
					t.Fatalf("%s: %d bytes, want %d", kv.Key, len(kv.Value), want)
				}
				if len(kv.Value) == len(big) && string(kv.Value) != string(big) {
					t.Fatalf("%s: value altered", kv.Key)
				}
			}
			mu.Lock()
			want := total
			for _, r := range late {
				if r <= rev {
					want++
				}
			}
			mu.Unlock()
			if len(kvs) != want {
				t.Fatalf("listed %d keys at revision %d, want the %d written by then", len(kvs), rev, want)
			}
			t.Logf("listed %d keys, %d MiB, at revision %d in %s", len(kvs), bytes>>20, rev, time.Since(start).Round(time.Millisecond))
		})
	}
}

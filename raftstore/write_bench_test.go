package raftstore_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// BenchmarkWrite: updates of 3 KB pods by a named writer whose writes
// are confined (a WriteFilter check that allows them), 8 at a time, on a
// cluster of 3 replicas, as the pipeline's stages write pods. It reports
// the CPU time of the whole process (3 replicas, embedded NATS, the
// writers) per write, cpu-ns/write; allocs/op is the whole process's
// allocations per write.
func BenchmarkWrite(b *testing.B) {
	c := raftstoretest.MakeCluster(b, 3, func(cfg *raftstore.Config) {
		cfg.WriteFilter = func(user, key string) raftstore.WriteCheck {
			if user != "stage-status" || !strings.HasPrefix(key, "/registry/pods/") {
				return nil
			}
			return func(old, new []byte) error { return nil }
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	admin := c.Client(b)
	cl, err := raftstore.NewClient(c.Conn(b), raftstore.ClientConfig{User: "stage-status"})
	if err != nil {
		b.Fatal(err)
	}
	const writers, keys = 8, 1000
	value := bytes.Repeat([]byte("p"), 3000)
	revs := make([]atomic.Int64, keys)
	key := func(i int) string { return fmt.Sprintf("/registry/pods/default/web-7d9f8c6b5-%05d", i) }
	for i := range keys {
		rev, err := admin.Create(ctx, key(i), value)
		if err != nil {
			b.Fatal(err)
		}
		revs[i].Store(rev)
	}
	c.WaitForReplication(b)
	b.ReportAllocs()
	start := cpuTime(b)
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			// Each writer updates its own keys, so no write conflicts.
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				k := w + writers*int(i%(keys/writers))
				rev, err := cl.Update(ctx, key(k), value, revs[k].Load())
				if err != nil {
					b.Error(err)
					return
				}
				revs[k].Store(rev)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/write")
}

package raftstore_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWatchFanout writes values of 512 B or 3 KiB (8 writers, as a pipeline's
// stages do) to a prefix 18 watchers follow, as the pipeline's pod writes
// go to ~18 processes, and reports the CPU time of the whole process
// (replica, embedded NATS, writers and watch clients) per delivered event:
// cpu-ns/event, and the messages the NATS server delivered (the writes'
// requests and answers too) per event: nats-msgs/event. cache=0 is every
// stream encoding its own messages, coalesce=0s a message per commit.
func BenchmarkWatchFanout(b *testing.B) {
	d := raftstore.DefaultConfig()
	for _, tc := range []struct {
		value, cache int
		coalesce     time.Duration
	}{
		{512, 0, 0}, {512, d.WatchCacheBytes, 0}, {512, d.WatchCacheBytes, d.WatchCoalesce},
		{3 << 10, 0, 0}, {3 << 10, d.WatchCacheBytes, 0}, {3 << 10, d.WatchCacheBytes, d.WatchCoalesce},
	} {
		b.Run(fmt.Sprintf("value=%d/cache=%d/coalesce=%s", tc.value, tc.cache, tc.coalesce), func(b *testing.B) {
			c := raftstoretest.MakeCluster(b, 1, func(cfg *raftstore.Config) { cfg.WatchCacheBytes, cfg.WatchCoalesce = tc.cache, tc.coalesce })
			cl := c.Client(b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			const watchers, writers, keys = 18, 8, 1000
			var got atomic.Int64
			for range watchers {
				w, err := cl.Watch(ctx, "/registry/pods/", 0)
				if err != nil {
					b.Fatal(err)
				}
				defer w.Stop()
				go func() {
					for range w.Events() {
						got.Add(1)
					}
				}()
			}
			value := bytes.Repeat([]byte("p"), tc.value)
			start := cpuTime(b)
			v0, _ := c.NATS.Varz(nil)
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range writers {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						key := fmt.Sprintf("/registry/pods/ns/p%d", i%keys)
						if _, err := cl.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: key, Value: value}}}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			for got.Load() < int64(watchers*b.N) && ctx.Err() == nil && !b.Failed() {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime(b)-start)/float64(watchers*b.N), "cpu-ns/event")
			v1, _ := c.NATS.Varz(nil)
			b.ReportMetric(float64(v1.OutMsgs-v0.OutMsgs)/float64(watchers*b.N), "nats-msgs/event")
		})
	}
}

package raftstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// BenchmarkListSmall lists 10 keys of 1 KiB from a 3-replica cluster,
// linearizable and stale: the common list, which chunking must not slow.
func BenchmarkListSmall(b *testing.B) {
	c := raftstoretest.MakeCluster(b, 3)
	cl := c.Client(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	value := make([]byte, 1024)
	for i := range 10 {
		if _, err := cl.Create(ctx, fmt.Sprintf("/bench/k%02d", i), value); err != nil {
			b.Fatal(err)
		}
	}
	c.WaitForReplication(b)
	for _, tc := range []struct {
		name string
		opts []raftstore.ReadOption
	}{{"linearizable", nil}, {"stale", []raftstore.ReadOption{raftstore.Stale()}}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				kvs, _, err := cl.List(ctx, "/bench/", tc.opts...)
				if err != nil || len(kvs) != 10 {
					b.Fatalf("List = %d keys, %v", len(kvs), err)
				}
			}
		})
	}
}

package raftstore

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/podflow/podflow/proto/storev1"
)

// BenchmarkApplyUpdate: a follower's apply of one pod write, as raft
// hands it over: decode the entry (a 3 KB pod, the writer's compare and
// a confinement pin on its key) and apply it to a key space of 10,000
// pods with a watch history. allocs/op is what every replica allocates
// per write in its state machine.
func BenchmarkApplyUpdate(b *testing.B) {
	const keys = 10000
	f := newFSM(keys, 0, keys)
	value := bytes.Repeat([]byte("p"), 3000)
	key := func(i int) string { return fmt.Sprintf("/registry/pods/default/web-7d9f8c6b5-%05d", i%keys) }
	entry := func(i int, rev int64) []byte {
		k := key(i)
		data, err := (&storev1.Command{IdempotencyKey: fmt.Sprintf("status-%d", i), Kind: storev1.WriteKind_WRITE_KIND_UPDATE,
			Compares: []*storev1.Compare{{Key: k, ModRevision: rev}, {Key: k, ModRevision: rev}},
			Ops:      []*storev1.Op{{Type: storev1.OpType_OP_TYPE_PUT, Key: k, Value: value}},
		}).MarshalVT()
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	var index uint64
	applyEntry := func(data []byte) {
		index++
		res := f.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}})[0].(*storev1.WriteResult)
		if res.Error != nil {
			b.Fatal(res.Error)
		}
	}
	for i := range keys {
		applyEntry(entry(i, 0))
	}
	const chunk = 1024
	logs := make([][]byte, 0, chunk)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(logs) == 0 {
			b.StopTimer()
			for j := i; j < i+chunk; j++ {
				kv, _ := f.get(key(j))
				// Entries of one chunk touch distinct keys (chunk < keys).
				logs = append(logs, entry(keys+j, kv.ModRevision))
			}
			b.StartTimer()
		}
		applyEntry(logs[0])
		logs = logs[1:]
		if len(logs) == 0 {
			logs = logs[:0:0]
			logs = make([][]byte, 0, chunk)
		}
	}
}

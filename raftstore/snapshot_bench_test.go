package raftstore

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// discardSink is a raft.SnapshotSink that counts what it is given.
type discardSink struct{ n int64 }

func (s *discardSink) Write(p []byte) (int, error) { s.n += int64(len(p)); return len(p), nil }
func (s *discardSink) ID() string                  { return "discard" }
func (s *discardSink) Cancel() error               { return nil }
func (s *discardSink) Close() error                { return nil }

var _ io.Writer = (*discardSink)(nil)

// BenchmarkSnapshotPersist: encoding a snapshot of 20,000 keys of 1 KiB
// and a watch history of 20,000 events, as a replica does at every
// snapshot (its cost grows with the state: at 100,000 pods a snapshot
// holds ~700,000 records).
func BenchmarkSnapshotPersist(b *testing.B) {
	const keys = 20000
	f := newFSM(keys, 0, 100)
	val := bytes.Repeat([]byte("v"), 1024)
	for i := range 2 * keys {
		apply(b, f, put(fmt.Sprintf("/registry/pods/default/p%05d", i%keys), string(val), fmt.Sprintf("w%d", i)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var sink discardSink
	for b.Loop() {
		s, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Persist(&sink); err != nil {
			b.Fatal(err)
		}
		s.Release()
	}
	b.SetBytes(sink.n / int64(b.N))
}

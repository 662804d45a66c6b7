package raftstore

import (
	"strconv"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestTailTruncationSurvivesRestart: a follower that clears a conflicting
// suffix of its log (raft's DeleteRange of the tail, after a leader
// change) and is then restarted reads its whole log back. raft-wal v0.4.0
// marked the truncated tail sealed without writing its index block
// (hashicorp/raft-wal#31): every start after that failed with "sealed
// segment has no index block", and the replica never came back (make
// chaos, a store replica killed after a leader change).
func TestTailTruncationSurvivesRestart(t *testing.T) {
	for _, segBytes := range []int{64 << 10, 64 << 20} {
		t.Run(strconv.Itoa(segBytes), func(t *testing.T) { tailTruncationSurvivesRestart(t, segBytes) })
	}
}

func tailTruncationSurvivesRestart(t *testing.T, segBytes int) {
	dir := t.TempDir()
	open := func() *walStore {
		s, err := openLogStore(dir, true, segBytes, hclog.NewNullLogger(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	var logs []*raft.Log
	for i := uint64(1); i <= 300; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: make([]byte, 512)})
	}
	if err := s.StoreLogs(logs); err != nil { // crosses segment rotations
		t.Fatal(err)
	}
	if err := s.DeleteRange(291, 300); err != nil { // the conflicting suffix
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: 291, Term: 2, Type: raft.LogCommand, Data: []byte("new leader")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open()
	defer s.Close()
	last, err := s.LastIndex()
	if err != nil || last != 291 {
		t.Fatalf("after the restart the last index is %d (%v), want 291", last, err)
	}
	for i := uint64(1); i <= 291; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("after the restart: get log %d: %v", i, err)
		}
		if want := uint64(1) + i/291; l.Term != want {
			t.Fatalf("log %d has term %d, want %d", i, l.Term, want)
		}
	}
}

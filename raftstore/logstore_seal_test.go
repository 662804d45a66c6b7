package raftstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

const sealTestSegment = 64 << 10

// sealedTail is a tail segment file just before and just after the append
// that sealed it: the bytes a crash during that append, or after it and
// before the rotation's meta update, can leave behind.
type sealedTail struct {
	info          types.SegmentInfo
	before, after []byte // the file's bytes
	lastBefore    uint64 // the last index committed before the sealing append
	lastAfter     uint64
	indexStart    uint64 // where the seal's index array starts
}

func entryData(i uint64) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("entry %d;", i)), 100)
}

// writeUntilSeal appends batches of three entries to a new segment, as
// raft-wal's WAL does, until one of them seals it.
func writeUntilSeal(t *testing.T) sealedTail {
	t.Helper()
	dir := t.TempDir()
	info := types.SegmentInfo{ID: 1, BaseIndex: 1, MinIndex: 1, SizeLimit: sealTestSegment,
		Codec: wal.CodecBinaryV1, CreateTime: time.Now()}
	w, err := segment.NewFiler(dir, fs.New()).Create(info)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	path := filepath.Join(dir, segment.FileName(info))
	for next := uint64(1); ; next += 3 {
		before, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var batch []types.LogEntry
		for i := next; i < next+3; i++ {
			var enc bytes.Buffer
			if err := (&wal.BinaryCodec{}).Encode(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: entryData(i)}, &enc); err != nil {
				t.Fatal(err)
			}
			batch = append(batch, types.LogEntry{Index: i, Data: enc.Bytes()})
		}
		if err := w.Append(batch); err != nil {
			t.Fatal(err)
		}
		if sealed, indexStart, err := w.Sealed(); err != nil || sealed {
			after, rerr := os.ReadFile(path)
			if err != nil || rerr != nil {
				t.Fatal(err, rerr)
			}
			return sealedTail{info: info, before: before, after: after,
				lastBefore: next - 1, lastAfter: next + 2, indexStart: indexStart}
		}
	}
}

// TestInterruptedSealRecovers: a replica killed while the append that
// fills its tail segment is being written, or after it and before raft-wal
// records the seal in its meta database, starts again with every entry
// whose append returned, and takes new appends. The kill may cut the
// write anywhere: the cases cut it through the batch's entries, its index
// frame and its commit frame, and not at all.
//
// Without completeSealedTail the uncut case fails every append ("segment
// is sealed", raft-wal v0.4). Finishing every seal raft-wal's recovery
// reports, without checking its commit, fails the torn ones: the replica
// could not read its last entry at the next start ("failed to read
// segment index: EOF", TestSIGKILLMidWriteRecoversLog once under a full
// make test).
func TestInterruptedSealRecovers(t *testing.T) {
	st := writeUntilSeal(t)
	if st.lastBefore == 0 || len(st.after) <= len(bytes.TrimRight(st.before, "\x00")) {
		t.Fatalf("the sealing append wrote nothing new: %+v", st.info)
	}
	idx := int(st.indexStart)
	indexLen := 4 * int(st.lastAfter)
	indexEnd := idx + indexLen + (8-indexLen%8)%8
	cases := []struct {
		name string
		cut  int // bytes of the sealing append on disk: after[:cut], then before's
		last uint64
	}{
		{"in the batch's last entry", idx - 8 - 100, st.lastBefore},
		{"before the index frame", idx - 8, st.lastBefore},
		{"after the index frame's header", idx, st.lastBefore},
		{"in the index", idx + indexLen/2, st.lastBefore},
		{"before the commit frame", indexEnd, st.lastBefore},
		{"in the commit frame", indexEnd + 4, st.lastBefore},
		{"not at all", len(st.after), st.lastAfter},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			meta := &metadb.BoltMetaDB{}
			ps, err := meta.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			ps.NextSegmentID, ps.Segments = 2, []types.SegmentInfo{st.info} // the seal not recorded
			if err := meta.CommitState(ps); err != nil {
				t.Fatal(err)
			}
			if err := meta.Close(); err != nil {
				t.Fatal(err)
			}
			file := append([]byte(nil), st.after[:c.cut]...)
			if c.cut < len(st.before) {
				file = append(file, st.before[c.cut:]...)
			}
			if err := os.WriteFile(filepath.Join(dir, segment.FileName(st.info)), file, 0o644); err != nil {
				t.Fatal(err)
			}

			want := c.last
			for start := range 2 {
				s, err := openWAL(dir, false, sealTestSegment, hclog.NewNullLogger(), nil)
				if err != nil {
					t.Fatalf("start %d: %v", start, err)
				}
				last, err := s.LastIndex()
				if err != nil || last != want {
					s.Close()
					t.Fatalf("start %d: last index %d (%v), want %d", start, last, err, want)
				}
				for i := uint64(1); i <= want; i++ {
					var l raft.Log
					if err := s.GetLog(i, &l); err != nil || !bytes.Equal(l.Data, entryData(i)) {
						s.Close()
						t.Fatalf("start %d: log %d: %v (%d bytes)", start, i, err, len(l.Data))
					}
				}
				if start == 0 { // the replica commits again
					var logs []*raft.Log
					for i := want + 1; i <= want+3; i++ {
						logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: entryData(i)})
					}
					if err := s.StoreLogs(logs); err != nil {
						s.Close()
						t.Fatalf("append after the crash: %v", err)
					}
					want += 3
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestCheckSealRefusesWhatItCannotExplain: a segment whose frames
// disagree with what raft-wal's recovery reported is an error, and
// nothing is cut from it.
func TestCheckSealRefusesWhatItCannotExplain(t *testing.T) {
	st := writeUntilSeal(t)
	torn := append(append([]byte(nil), st.after[:st.indexStart]...), st.before[min(int(st.indexStart), len(st.before)):]...)
	for _, c := range []struct {
		name       string
		file       []byte
		indexStart uint64
		entries    uint64
	}{
		{"a committed seal over more entries than recovery found", st.after, st.indexStart, st.lastAfter - 1},
		{"a torn seal after more commits than recovery found", torn, st.indexStart, st.lastBefore - 3},
		{"the index frame elsewhere", st.after, st.indexStart + 8, st.lastAfter},
	} {
		if committed, cut, err := checkSeal(c.file, c.indexStart, c.entries); err == nil {
			t.Errorf("%s: committed %v, cut at %d, no error", c.name, committed, cut)
		}
	}
	if committed, _, err := checkSeal(st.after, st.indexStart, st.lastAfter); err != nil || !committed {
		t.Errorf("the whole seal: committed %v, %v", committed, err)
	}
	if committed, cut, err := checkSeal(torn, st.indexStart, st.lastBefore); err != nil || committed || cut <= walFileHeaderLen || cut >= int64(st.indexStart) {
		t.Errorf("a torn seal: committed %v, cut at %d (index at %d), %v", committed, cut, st.indexStart, err)
	}
}

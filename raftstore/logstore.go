package raftstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	walmetrics "github.com/hashicorp/raft-wal/metrics"
	"github.com/hashicorp/raft-wal/migrate"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"
)

// Names in the data directory.
const (
	walDir         = "wal"              // the raft log and stable store (raft-wal)
	walTmpDir      = "wal.migrating"    // a migration under way
	boltLog        = "raft.db"          // the log store of releases before raft-wal
	boltLogArchive = "raft.db.migrated" // boltLog after its migration, kept for the operator
	lockFile       = "LOCK"             // flock'ed by the replica that owns the directory
	migrateBatch   = 4 << 20            // bytes per append while migrating
)

// openLogStore opens the raft log and stable store in dataDir/wal, first
// migrating a bolt log (dataDir/raft.db, written by releases before raft-wal)
// into it. The migration copies into dataDir/wal.migrating and renames it
// into place, then renames raft.db to raft.db.migrated, so a crash at any
// point leaves either the untouched bolt log (and the copy is redone) or a
// complete WAL.
func openLogStore(dataDir string, noSync bool, segmentBytes int, log hclog.Logger, mc walmetrics.Collector) (*walStore, error) {
	dir := filepath.Join(dataDir, walDir)
	bolt := filepath.Join(dataDir, boltLog)
	_, boltErr := os.Stat(bolt)
	_, walErr := os.Stat(dir)
	switch {
	case boltErr == nil && errors.Is(walErr, os.ErrNotExist):
		if err := migrateBolt(dataDir, noSync, segmentBytes, log); err != nil {
			return nil, fmt.Errorf("migrate %q to raft-wal (to start afresh instead, remove the replica and rejoin it with an empty data dir): %w", bolt, err)
		}
		fallthrough
	case boltErr == nil:
		// The WAL is complete (it is renamed into place only when it is);
		// retire the bolt log so no later start reads it.
		if err := os.Rename(bolt, filepath.Join(dataDir, boltLogArchive)); err != nil {
			return nil, fmt.Errorf("retire migrated %q: %w", bolt, err)
		}
		if err := syncDir(dataDir); err != nil {
			return nil, err
		}
		log.Info("migrated the bolt raft log to raft-wal", "wal", dir, "old", boltLogArchive)
	case !errors.Is(boltErr, os.ErrNotExist):
		return nil, fmt.Errorf("inspect %q: %w", bolt, boltErr)
	}
	if err := os.MkdirAll(dir, privateDirMode); err != nil {
		return nil, fmt.Errorf("create %q: %w", dir, err)
	}
	return openWAL(dir, noSync, segmentBytes, log, mc)
}

// walStore is the raft log and stable store. Close closes the WAL's meta
// database too: raft-wal v0.4.0's WAL.Close left it open, with its flock
// held, so a restart in the same process waited for it forever. v0.4.2
// closes it itself, and a second Close is a no-op.
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

func (s *walStore) Close() error {
	return errors.Join(s.WAL.Close(), s.meta.Close())
}

func openWAL(dir string, noSync bool, segmentBytes int, log hclog.Logger, mc walmetrics.Collector) (*walStore, error) {
	var vfs types.VFS = privateFS{fs.New()}
	if noSync {
		vfs = noSyncFS{vfs}
	}
	if mc == nil {
		mc = &walmetrics.NoOpCollector{}
	}
	meta := &metadb.BoltMetaDB{}
	filer := segment.NewFiler(dir, vfs)
	if err := completeSealedTail(dir, meta, filer, segmentBytes, log); err != nil {
		_ = meta.Close()
		return nil, fmt.Errorf("open raft-wal in %q: %w", dir, err)
	}
	w, err := wal.Open(dir, wal.WithLogger(log), wal.WithSegmentSize(segmentBytes), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(filer), wal.WithMetricsCollector(mc))
	if err != nil {
		_ = meta.Close()
		return nil, fmt.Errorf("open raft-wal in %q: %w", dir, err)
	}
	return &walStore{WAL: w, meta: meta}, nil
}

// completeSealedTail finishes or undoes a segment seal a crash cut short.
//
// raft-wal seals a full tail segment with the append that fills it: the
// batch's entries, an index frame and a commit frame, written and fsynced
// together. It records the seal and the next segment in its meta database
// afterwards, asynchronously. Killed in between, Open recovers the sealed
// file as the writable tail, and every append fails with "segment is
// sealed" for ever: the replica never commits again
// (TestSIGKILLMidWriteRecoversLog found it).
//
// Killed during the sealing write itself, the file may hold the index
// frame, or part of it, without the commit frame after it (a SIGKILL may end
// a write to a regular file at a page boundary). raft-wal's recovery
// drops the uncommitted batch but still reports the segment sealed, at an
// index that was never completely written, so finishing the rotation
// there fails every later start ("failed to read segment index: EOF").
//
// So here, before Open, a tail the meta database lists as unsealed but
// whose file says sealed is checked the way raft-wal checks a batch (the
// commit frame after the index, and its CRC):
//   - a committed seal gets the rotation's meta update: sealed at its last
//     index, and a new empty tail after it, whose file Open creates;
//   - a torn one is cut off the file at the end of the last commit before
//     it, and the segment stays the writable tail. Only the batch whose
//     append never returned is lost.
func completeSealedTail(dir string, meta *metadb.BoltMetaDB, filer *segment.Filer, segmentBytes int, log hclog.Logger) error {
	st, err := meta.Load(dir)
	if err != nil || len(st.Segments) == 0 {
		return err
	}
	tail := &st.Segments[len(st.Segments)-1]
	if !tail.SealTime.IsZero() {
		return nil
	}
	sw, err := filer.RecoverTail(*tail)
	if errors.Is(err, os.ErrNotExist) {
		return nil // Open creates it
	}
	if err != nil {
		return err
	}
	sealed, indexStart, err := sw.Sealed()
	last := sw.LastIndex()
	if cerr := sw.Close(); err == nil {
		err = cerr
	}
	if err != nil || !sealed {
		return err
	}
	var entries uint64 // committed entry frames, as recovery counted them
	if last >= tail.BaseIndex {
		entries = last - tail.BaseIndex + 1
	}
	path := filepath.Join(dir, segment.FileName(*tail))
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	committed, cut, err := checkSeal(b, indexStart, entries)
	if err != nil {
		return fmt.Errorf("segment %s: %w", path, err)
	}
	if !committed {
		log.Warn("discarding a torn segment seal (its append never returned)",
			"segment", path, "last-index", last, "cut-at", cut, "file-bytes", len(b))
		return truncateSync(path, cut)
	}
	now := time.Now()
	tail.SealTime, tail.MaxIndex, tail.IndexStart = now, last, indexStart
	st.Segments = append(st.Segments, types.SegmentInfo{
		ID: st.NextSegmentID, BaseIndex: last + 1, MinIndex: last + 1,
		SizeLimit: uint32(segmentBytes), Codec: wal.CodecBinaryV1, CreateTime: now,
	})
	st.NextSegmentID++
	return meta.CommitState(st)
}

// raft-wal's segment file format (segment/format.go, v0.4): a 32-byte file
// header, then frames of an 8-byte header (type, 3 zero bytes, and a
// little-endian length, or for a commit frame the CRC-32C of its batch)
// and a payload padded to 8 bytes. A commit's batch runs from the end of
// the commit before it (from the file's start for the first) to the
// commit frame itself.
const (
	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
	walFrameEntry     = 1
	walFrameIndex     = 2
	walFrameCommit    = 3
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkSeal walks a recovered tail segment's frames, b its bytes, and
// tells whether its seal, the index frame whose array starts at
// indexStart, was committed: followed by a commit frame whose CRC matches.
// entries is how many committed entries raft-wal's recovery found. If the
// seal is not committed, cut is the end of the last commit before it.
// A file that fits neither is an error: nothing is cut from it.
func checkSeal(b []byte, indexStart, entries uint64) (committed bool, cut int64, err error) {
	var (
		off        = int64(walFileHeaderLen)
		batch      int64  // where the batch of the next commit starts
		n          uint64 // entry frames before off
		nCommitted uint64 // entry frames up to the last commit
		indexFrame = int64(indexStart) - walFrameHeaderLen
		afterIndex bool // the frame before off is the seal's index
	)
walk:
	for off+walFrameHeaderLen <= int64(len(b)) {
		typ, v := b[off], binary.LittleEndian.Uint32(b[off+4:off+walFrameHeaderLen])
		switch {
		case typ == walFrameCommit && afterIndex:
			if crc32.Checksum(b[batch:off], castagnoli) != v {
				break walk // torn: the commit frame is there, not all of its batch
			}
			if n != entries {
				return false, 0, fmt.Errorf("its seal is committed over %d entries, but recovery found %d", n, entries)
			}
			return true, 0, nil
		case typ == walFrameCommit:
			batch, nCommitted = off+walFrameHeaderLen, n
			off += walFrameHeaderLen
		case (typ == walFrameEntry || typ == walFrameIndex) && !afterIndex:
			if typ == walFrameIndex {
				if off != indexFrame {
					return false, 0, fmt.Errorf("an index frame at offset %d, but recovery sealed it at %d", off, indexFrame)
				}
				afterIndex = true
			} else {
				n++
			}
			off += walFrameHeaderLen + int64(v) + int64((walFrameHeaderLen-v%walFrameHeaderLen)%walFrameHeaderLen)
		default:
			break walk // zeros, a torn frame, or the end of what was written
		}
	}
	if nCommitted != entries {
		return false, 0, fmt.Errorf("its seal is torn, but %d entries are committed before it where recovery found %d", nCommitted, entries)
	}
	return false, batch, nil
}

// truncateSync cuts the file at path to size bytes, durably.
func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cut %q at %d bytes: %w", path, size, err)
	}
	return nil
}

// migrateBolt copies the log entries and raft's stable keys of
// dataDir/raft.db into a new WAL at dataDir/wal.
func migrateBolt(dataDir string, noSync bool, segmentBytes int, log hclog.Logger) (err error) {
	tmp := filepath.Join(dataDir, walTmpDir)
	if err := os.RemoveAll(tmp); err != nil { // an earlier, interrupted copy
		return err
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	src, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(dataDir, boltLog),
		BoltOptions: &bbolt.Options{Timeout: time.Second, ReadOnly: true}, // the LOCK is ours: nobody else holds it
	})
	if err != nil {
		return fmt.Errorf("open bolt log: %w", err)
	}
	defer src.Close()
	dst, err := openWAL(tmp, noSync, segmentBytes, log, nil)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close new WAL: %w", cerr)
		}
		if err == nil {
			err = os.Rename(tmp, filepath.Join(dataDir, walDir))
		}
		if err == nil {
			err = syncDir(dataDir)
		}
	}()
	ctx := context.Background()
	if last, err := src.LastIndex(); err != nil {
		return fmt.Errorf("bolt log last index: %w", err)
	} else if last > 0 { // CopyLogs assumes a non-empty log
		if err := migrate.CopyLogs(ctx, dst, src, migrateBatch, nil); err != nil {
			return err
		}
	}
	return migrate.CopyStable(ctx, dst, src, nil, nil, nil)
}

// lockDataDir takes an exclusive flock on dataDir/LOCK, so two replicas
// never share a data directory (raft-wal's meta database would otherwise
// wait forever for the other's lock). The kernel drops the lock when the
// process dies, SIGKILL included; release unlocks it.
func lockDataDir(dataDir string) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(dataDir, lockFile), os.O_RDWR|os.O_CREATE, privateFileMode)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: data dir %q is in use by another replica", ErrDataDirLocked, dataDir)
		}
		return nil, fmt.Errorf("lock data dir %q: %w", dataDir, err)
	}
	return func() { f.Close() }, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %q: %w", dir, err)
	}
	return nil
}

// noSyncFS is raft-wal's file system without fsync (Config.NoSync).
type noSyncFS struct{ types.VFS }

func (f noSyncFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	w, err := f.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return noSyncFile{w}, nil
}

func (f noSyncFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	w, err := f.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return noSyncFile{w}, nil
}

type noSyncFile struct{ types.WritableFile }

func (noSyncFile) Sync() error { return nil }

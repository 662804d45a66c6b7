package raftstore

import (
	"context"
	"errors"
	"fmt"
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %q: %w", dir, err)
	}
	return openWAL(dir, noSync, segmentBytes, log, mc)
}

// walStore is the raft log and stable store. Close closes the WAL's meta
// database too, which raft-wal v0.4.0's WAL.Close leaves open (with its
// flock held, so a restart in the same process would wait for it forever).
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

func (s *walStore) Close() error {
	return errors.Join(s.WAL.Close(), s.meta.Close())
}

func openWAL(dir string, noSync bool, segmentBytes int, log hclog.Logger, mc walmetrics.Collector) (*walStore, error) {
	var vfs types.VFS = fs.New()
	if noSync {
		vfs = noSyncFS{vfs}
	}
	if mc == nil {
		mc = &walmetrics.NoOpCollector{}
	}
	meta := &metadb.BoltMetaDB{}
	filer := segment.NewFiler(dir, vfs)
	if err := completeSealedTail(dir, meta, filer, segmentBytes); err != nil {
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

// completeSealedTail finishes a segment rotation a crash cut short.
// raft-wal seals a full tail segment (its index frame and last commit are
// written with the append that fills it) and records the seal and the next
// segment in its meta database afterwards, asynchronously. Killed in
// between, v0.4.0's Open recovers the sealed file as the writable tail, and
// every append fails with "segment is sealed" for ever: the replica never
// commits again (TestSIGKILLMidWriteRecoversLog found it). Here, before
// Open, a tail the meta database lists as unsealed but whose file is
// sealed gets the rotation's meta update — sealed at its last index, and a
// new empty tail after it, whose file Open creates.
func completeSealedTail(dir string, meta *metadb.BoltMetaDB, filer *segment.Filer, segmentBytes int) error {
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
	now := time.Now()
	tail.SealTime, tail.MaxIndex, tail.IndexStart = now, last, indexStart
	st.Segments = append(st.Segments, types.SegmentInfo{
		ID: st.NextSegmentID, BaseIndex: last + 1, MinIndex: last + 1,
		SizeLimit: uint32(segmentBytes), Codec: wal.CodecBinaryV1, CreateTime: now,
	})
	st.NextSegmentID++
	return meta.CommitState(st)
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
	f, err := os.OpenFile(filepath.Join(dataDir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
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

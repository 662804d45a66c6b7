package raftstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/types"
)

// Modes of everything in a data directory: the raft log, snapshots and
// stable store hold every stored value (Secrets among them), so nobody but
// the replica's uid may read them.
const (
	privateDirMode  fs.FileMode = 0o700
	privateFileMode fs.FileMode = 0o600
)

// ErrDataDirOwner is wrapped when something in a data directory belongs to
// another uid than the replica's.
var ErrDataDirOwner = errors.New("raftstore: data directory not owned by this replica's uid")

// securePrivateTree walks root and makes every directory 0700 and every
// file 0600 at most (execute and write bits of the owner are kept as they
// are; group and other lose every bit). With report, each path repaired is
// logged once, as a warning: something made it readable by others (an
// older release, a copy, an operator). A path owned by another uid is
// refused with ErrDataDirOwner: whoever owns it can read and change it
// whatever its mode. Symbolic links are neither followed nor changed.
func securePrivateTree(root string, log hclog.Logger, report bool) error {
	uid := os.Geteuid()
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != root {
				return nil // removed while we walked (a snapshot being replaced)
			}
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) && path != root {
			return nil
		}
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid {
			return fmt.Errorf("%w: %q is owned by uid %d, this replica runs as uid %d (chown it, or use another data directory)", ErrDataDirOwner, path, st.Uid, uid)
		}
		mode := info.Mode().Perm()
		if mode&0o077 == 0 {
			return nil
		}
		want := mode &^ 0o077
		if info.IsDir() {
			want |= privateDirMode
		} else {
			want |= privateFileMode
		}
		if err := os.Chmod(path, want); err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != root {
				return nil
			}
			return fmt.Errorf("make %q private: %w", path, err)
		}
		if report {
			log.Warn("data directory path was open to other users; made it owner-only", "path", path, "mode", fmt.Sprintf("%04o", mode), "now", fmt.Sprintf("%04o", want))
		}
		return nil
	})
}

// privateFS is raft-wal's file system creating every segment 0600 (raft-wal
// creates them 0644).
type privateFS struct{ types.VFS }

func (p privateFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := p.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(dir, name), privateFileMode); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("make %q private: %w", filepath.Join(dir, name), err)
	}
	return f, nil
}

// privateSnapshots is a FileSnapshotStore whose snapshots end up owner-only
// (raft writes them 0755/0644): each sink makes its snapshot's directory
// and files private when it closes. They are written inside the snapshots
// directory, itself 0700, so no other user reaches them meanwhile either.
type privateSnapshots struct {
	*raft.FileSnapshotStore
	dir string // the snapshots directory
	log hclog.Logger
}

var _ raft.SnapshotStore = (*privateSnapshots)(nil)

func (s *privateSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &privateSink{SnapshotSink: sink, s: s}, nil
}

type privateSink struct {
	raft.SnapshotSink
	s *privateSnapshots
}

// Close completes the snapshot, then makes it owner-only.
func (k *privateSink) Close() error {
	if err := k.SnapshotSink.Close(); err != nil {
		return err
	}
	return securePrivateTree(k.s.dir, k.s.log, false)
}

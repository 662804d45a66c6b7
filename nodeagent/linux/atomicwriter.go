package linux

import (
	stdbytes "bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/podflow/podflow/nodeagent"
)

// The atomic writer is kubelet's (pkg/volume/util/atomic_writer.go): a
// projected volume's files live in a timestamped directory
// "..2006_01_02_15_04_05.<random>", "..data" is a symlink to it, and each
// top-level name of the payload is a symlink "name -> ..data/name". An
// update writes a new timestamped directory, swaps "..data" to it with one
// rename (so a reader sees the old set of files or the new, never a mix),
// adds and removes the top-level links, then removes the old directory.
// A payload equal to what is there (contents and modes) writes nothing.
const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
)

// projection is one file of a payload.
type projection struct {
	data []byte
	mode os.FileMode
}

// writeAtomic makes dir hold exactly payload (paths relative to dir).
func writeAtomic(dir string, payload map[string]projection) error {
	clean := make(map[string]projection, len(payload))
	for p, f := range payload {
		if err := nodeagent.ValidateVolumePath(p); err != nil {
			return err
		}
		c := filepath.Clean(p)
		if c == "." {
			return fmt.Errorf("invalid path: %q names the volume itself", p)
		}
		clean[c] = f
	}
	dataLink := filepath.Join(dir, dataDirName)
	oldTs, err := os.Readlink(dataLink)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", dataLink, err)
	}
	var old map[string]bool // the current payload's paths
	if oldTs != "" {
		if old, err = payloadPaths(filepath.Join(dir, oldTs)); err != nil {
			return err
		}
		same, err := samePayload(filepath.Join(dir, oldTs), old, clean)
		if err != nil {
			return err
		}
		if same {
			return createVisible(dir, clean)
		}
	}
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	if err := writePayload(ts, clean); err != nil {
		os.RemoveAll(ts)
		return err
	}
	tmpLink := filepath.Join(dir, newDataDirName)
	if err := os.Remove(tmpLink); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		os.RemoveAll(ts)
		return fmt.Errorf("link %s: %w", tmpLink, err)
	}
	if err := os.Rename(tmpLink, dataLink); err != nil {
		os.Remove(tmpLink)
		os.RemoveAll(ts)
		return fmt.Errorf("swap %s: %w", dataLink, err)
	}
	if err := createVisible(dir, clean); err != nil {
		return err
	}
	if err := removeVisible(dir, old, clean); err != nil {
		return err
	}
	if oldTs != "" {
		return os.RemoveAll(filepath.Join(dir, oldTs))
	}
	return nil
}

// payloadPaths lists the files under a timestamped directory.
func payloadPaths(ts string) (map[string]bool, error) {
	out := map[string]bool{}
	err := filepath.WalkDir(ts, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(ts, p)
		out[rel] = true
		return err
	})
	return out, err
}

func samePayload(ts string, old map[string]bool, payload map[string]projection) (bool, error) {
	if len(old) != len(payload) {
		return false, nil
	}
	for p, f := range payload {
		if !old[p] {
			return false, nil
		}
		path := filepath.Join(ts, p)
		st, err := os.Lstat(path)
		if err != nil {
			return false, err
		}
		if st.Mode().Perm() != f.mode.Perm() {
			return false, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		if !stdbytes.Equal(data, f.data) {
			return false, nil
		}
	}
	return true, nil
}

func writePayload(ts string, payload map[string]projection) error {
	for p, f := range payload {
		path := filepath.Join(ts, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.data, 0o600); err != nil {
			return err
		}
		if err := os.Chmod(path, f.mode.Perm()); err != nil { // past the umask
			return err
		}
	}
	return nil
}

// topLevel is the first element of a payload path.
func topLevel(p string) string { s, _, _ := strings.Cut(p, "/"); return s }

// createVisible links each top-level name of payload to ..data.
func createVisible(dir string, payload map[string]projection) error {
	for p := range payload {
		name := topLevel(p)
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Symlink(filepath.Join(dataDirName, name), link); err != nil {
			return fmt.Errorf("link %s: %w", link, err)
		}
	}
	return nil
}

// removeVisible removes the top-level links of old that payload has not.
func removeVisible(dir string, old map[string]bool, payload map[string]projection) error {
	keep := map[string]bool{}
	for p := range payload {
		keep[topLevel(p)] = true
	}
	var gone []string
	for p := range old {
		if n := topLevel(p); !keep[n] && !slices.Contains(gone, n) {
			gone = append(gone, n)
		}
	}
	for _, n := range gone {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

package roles

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/podflow/podflow/services/nodeexec"
)

// simFSMaxBytes bounds the bytes all simulated containers' files hold
// together; an extraction past it fails as a full disk does.
const simFSMaxBytes = 64 << 20

// simFSBaseDirs exist in every simulated container.
var simFSBaseDirs = []string{"/", "/etc", "/home", "/root", "/tmp", "/usr", "/var"}

// simFSKey names one container of one pod on one node.
type simFSKey struct{ node, podUID, container string }

// simFile is a regular file (data) or a directory (dir) of a simulated
// container.
type simFile struct {
	dir  bool
	mode int64
	data []byte
}

// simFS holds the files of simulated containers, in memory: `tar x`
// writes them (kubectl cp into a pod), `tar c` reads them (kubectl cp out
// of one) and `test -d|-e|-f` looks at them. A container's files go when
// its pod does (prune). Safe for concurrent use.
type simFS struct {
	max int64

	mu    sync.Mutex
	files map[simFSKey]map[string]*simFile
	used  int64
}

func newSimFS(max int64) *simFS {
	return &simFS{max: max, files: map[simFSKey]map[string]*simFile{}}
}

var errSimNoSpace = errors.New("No space left on device")

// prune drops the files of the containers on node whose pods are not in
// live (pod UIDs).
func (fs *simFS) prune(node string, live map[string]bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for k, files := range fs.files {
		if k.node == node && !live[k.podUID] {
			for _, f := range files {
				fs.used -= int64(len(f.data))
			}
			delete(fs.files, k)
		}
	}
}

// stat is the file at p (cleaned, absolute) in k's container.
func (fs *simFS) stat(k simFSKey, p string) (*simFile, bool) {
	for _, d := range simFSBaseDirs {
		if p == d {
			return &simFile{dir: true, mode: 0o755}, true
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, ok := fs.files[k][p]
	return f, ok
}

// put stores f at p, creating its parent directories; it fails when the
// container's files would pass the bound or p's parent is a file.
func (fs *simFS) put(k simFSKey, p string, f *simFile) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	files := fs.files[k]
	if files == nil {
		files = map[string]*simFile{}
		fs.files[k] = files
	}
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if old, ok := files[d]; ok && !old.dir {
			return fmt.Errorf("%s: Not a directory", d)
		}
	}
	old := files[p]
	delta := int64(len(f.data))
	if old != nil {
		if old.dir && f.dir {
			return nil
		}
		delta -= int64(len(old.data))
	}
	if fs.used+delta > fs.max {
		return errSimNoSpace
	}
	fs.used += delta
	files[p] = f
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if _, ok := files[d]; !ok {
			files[d] = &simFile{dir: true, mode: 0o755}
		}
	}
	return nil
}

// under is the paths at and below p in k's container, sorted (a
// directory before its contents).
func (fs *simFS) under(k simFSKey, p string) []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []string
	for q := range fs.files[k] {
		if q == p || strings.HasPrefix(q, strings.TrimSuffix(p, "/")+"/") {
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}

// simTest answers `test -d|-e|-f PATH` (kubectl cp asks whether its
// destination is a directory).
func (fs *simFS) simTest(k simFSKey, args []string) error {
	if len(args) != 2 {
		return &nodeexec.ExitError{Code: 2}
	}
	f, ok := fs.stat(k, path.Clean("/"+args[1]))
	switch {
	case args[0] == "-e" && ok, args[0] == "-d" && ok && f.dir, args[0] == "-f" && ok && !f.dir:
		return nil
	}
	return &nodeexec.ExitError{Code: 1}
}

// simTar answers the tar commands kubectl cp runs: `tar [-]x…f - [-C DIR]`
// extracts stdin's archive into DIR (regular files and directories), and
// `tar [-]c…f - PATH…` writes an archive of each PATH (recursively, names
// without the leading "/", as GNU tar) to stdout. Other options (--no-…)
// are accepted and ignored.
func (fs *simFS) simTar(k simFSKey, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fail := func(code int, format string, a ...any) error {
		fmt.Fprintf(stderr, "tar: "+format+"\n", a...)
		return &nodeexec.ExitError{Code: code}
	}
	var mode string
	dir := "/"
	var members []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-C" && i+1 < len(args):
			i++
			dir = path.Clean("/" + args[i])
		case a == "-" || strings.HasPrefix(a, "--"):
		case mode == "":
			mode = strings.TrimPrefix(a, "-")
		default:
			members = append(members, a)
		}
	}
	switch {
	case strings.Contains(mode, "x"):
		if f, ok := fs.stat(k, dir); !ok || !f.dir {
			return fail(2, "can't change directory to '%s': No such file or directory", dir)
		}
		if stdin == nil {
			return fail(2, "no archive on stdin")
		}
		tr := tar.NewReader(stdin)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fail(2, "%v", err)
			}
			p := path.Join(dir, path.Clean("/"+h.Name))
			f := &simFile{mode: h.Mode & 0o7777}
			switch h.Typeflag {
			case tar.TypeDir:
				f.dir = true
			case tar.TypeReg:
				// Read at most one byte past the bound: put then refuses.
				b, err := io.ReadAll(io.LimitReader(tr, fs.max+1))
				if err != nil {
					return fail(2, "%s: %v", h.Name, err)
				}
				f.data = b
			default:
				fmt.Fprintf(stderr, "tar: %s: skipped (the simulated runtime keeps regular files and directories)\n", h.Name)
				continue
			}
			if err := fs.put(k, p, f); err != nil {
				return fail(1, "%s: Cannot write: %v", h.Name, err)
			}
		}
	case strings.Contains(mode, "c"):
		if len(members) == 0 {
			return fail(2, "Cowardly refusing to create an empty archive")
		}
		tw := tar.NewWriter(stdout)
		for _, m := range members {
			p := path.Clean("/" + m)
			paths := fs.under(k, p)
			if len(paths) == 0 {
				if f, ok := fs.stat(k, p); ok && f.dir {
					paths = []string{p} // a base directory, empty
				} else {
					return fail(2, "%s: Cannot stat: No such file or directory", m)
				}
			}
			for _, q := range paths {
				f, ok := fs.stat(k, q)
				if !ok {
					continue // removed meanwhile
				}
				h := &tar.Header{Name: strings.TrimPrefix(q, "/"), Mode: f.mode, Typeflag: tar.TypeReg, Size: int64(len(f.data)), Format: tar.FormatPAX}
				if f.dir {
					h.Name += "/"
					h.Typeflag, h.Size = tar.TypeDir, 0
				}
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
				if _, err := tw.Write(f.data); err != nil {
					return err
				}
			}
		}
		return tw.Close()
	}
	return fail(2, "You must specify one of the '-c' or '-x' options")
}

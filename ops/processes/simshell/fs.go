package simshell

import (
	"errors"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
)

// DefaultMaxBytes bounds the bytes all simulated containers' written files
// hold together; a write past it fails as a full disk does.
const DefaultMaxBytes = 64 << 20

// baseDirs exist in every simulated container.
var baseDirs = []string{"/", "/bin", "/dev", "/etc", "/home", "/proc", "/root", "/sys", "/tmp", "/usr", "/usr/bin", "/var"}

// Key names one container of one pod on one node.
type Key struct{ Node, PodUID, Container string }

// file is a regular file (data) or a directory (dir).
type file struct {
	dir      bool
	mode     fs.FileMode
	data     []byte
	readOnly bool // a volume's or the runtime's file
}

// Errors of the simulated filesystem, with the words of busybox.
var (
	ErrNoSpace  = errors.New("No space left on device")
	ErrNotExist = errors.New("No such file or directory")
	ErrIsDir    = errors.New("Is a directory")
	ErrNotDir   = errors.New("Not a directory")
	ErrReadOnly = errors.New("Read-only file system")
	ErrNotEmpty = errors.New("Directory not empty")
)

// FS holds what simulated containers wrote, in memory, per container: the
// files of kubectl cp, of `echo x > f`, of mkdir. A container's files go
// when its pod does (Prune). Safe for concurrent use.
type FS struct {
	max int64

	mu    sync.Mutex
	files map[Key]map[string]*file
	used  int64
}

// NewFS returns an empty filesystem holding at most max bytes.
func NewFS(max int64) *FS { return &FS{max: max, files: map[Key]map[string]*file{}} }

// Used is the bytes held.
func (f *FS) Used() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used
}

// Prune drops the files of the containers on node whose pods are not in
// live (pod UIDs).
func (f *FS) Prune(node string, live map[string]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, files := range f.files {
		if k.Node == node && !live[k.PodUID] {
			for _, x := range files {
				f.used -= int64(len(x.data))
			}
			delete(f.files, k)
		}
	}
}

// View is one container's filesystem: the base directories, the files the
// runtime gives it (read-only: /etc/hostname, its volumes under their
// mount paths) and what it wrote.
type View struct {
	fs     *FS
	key    Key
	static map[string]*file
}

// View returns container k's filesystem; static maps absolute paths to
// the read-only files it sees (their directories implied), and readOnly
// lists the directories nothing may be written under (volume mounts).
func (f *FS) View(k Key, static map[string][]byte, readOnly []string) *View {
	v := &View{fs: f, key: k, static: map[string]*file{}}
	for _, d := range readOnly {
		v.static[path.Clean("/"+d)] = &file{dir: true, mode: 0o755, readOnly: true}
	}
	for p, data := range static {
		p = path.Clean("/" + p)
		v.static[p] = &file{mode: 0o644, data: data, readOnly: true}
		for d := path.Dir(p); ; d = path.Dir(d) {
			if _, ok := v.static[d]; !ok {
				v.static[d] = &file{dir: true, mode: 0o755}
			}
			if d == "/" {
				break
			}
		}
	}
	for _, d := range readOnly { // their parents exist too
		for q := path.Dir(path.Clean("/" + d)); ; q = path.Dir(q) {
			if _, ok := v.static[q]; !ok {
				v.static[q] = &file{dir: true, mode: 0o755}
			}
			if q == "/" {
				break
			}
		}
	}
	for _, d := range baseDirs {
		if _, ok := v.static[d]; !ok {
			v.static[d] = &file{dir: true, mode: 0o755}
		}
	}
	return v
}

// Clean makes p absolute relative to dir, cleaned.
func Clean(dir, p string) string {
	if !strings.HasPrefix(p, "/") {
		p = dir + "/" + p
	}
	return path.Clean("/" + p)
}

// stat is the file at p (clean, absolute).
func (v *View) stat(p string) (*file, bool) {
	if x, ok := v.static[p]; ok {
		return x, true
	}
	v.fs.mu.Lock()
	defer v.fs.mu.Unlock()
	x, ok := v.fs.files[v.key][p]
	return x, ok
}

// readOnly reports whether p is, or is under, a read-only file or
// directory (a volume's).
func (v *View) readOnly(p string) bool {
	for q := p; ; q = path.Dir(q) {
		if x, ok := v.static[q]; ok && x.readOnly {
			return true
		}
		if q == "/" {
			return false
		}
	}
}

// Entry is a directory entry.
type Entry struct {
	Name string
	Dir  bool
	Mode fs.FileMode
	Size int
}

// ReadDir lists directory p, sorted by name.
func (v *View) ReadDir(p string) ([]Entry, error) {
	x, ok := v.stat(p)
	if !ok {
		return nil, ErrNotExist
	}
	if !x.dir {
		return nil, ErrNotDir
	}
	seen := map[string]Entry{}
	add := func(q string, f *file) {
		if q == p || path.Dir(q) != p {
			return
		}
		seen[path.Base(q)] = Entry{Name: path.Base(q), Dir: f.dir, Mode: f.mode, Size: len(f.data)}
	}
	for q, f := range v.static {
		add(q, f)
	}
	v.fs.mu.Lock()
	for q, f := range v.fs.files[v.key] {
		add(q, f)
	}
	v.fs.mu.Unlock()
	out := make([]Entry, 0, len(seen))
	for _, e := range seen {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ReadFile is the content of regular file p.
func (v *View) ReadFile(p string) ([]byte, error) {
	x, ok := v.stat(p)
	switch {
	case !ok:
		return nil, ErrNotExist
	case x.dir:
		return nil, ErrIsDir
	}
	return x.data, nil
}

// WriteFile writes data to p (appended with app), creating it; its
// directory must exist.
func (v *View) WriteFile(p string, data []byte, app bool, mode fs.FileMode) error {
	if d, ok := v.stat(path.Dir(p)); !ok {
		return ErrNotExist
	} else if !d.dir {
		return ErrNotDir
	}
	if v.readOnly(p) {
		return ErrReadOnly
	}
	if x, ok := v.stat(p); ok {
		if x.dir {
			return ErrIsDir
		}
		if app {
			data = append(append([]byte(nil), x.data...), data...)
		}
		mode = x.mode
	}
	return v.put(p, &file{mode: mode, data: append([]byte(nil), data...)})
}

// Mkdir makes directory p (with parents, its missing parents too).
func (v *View) Mkdir(p string, parents bool) error {
	if x, ok := v.stat(p); ok {
		if parents && x.dir {
			return nil
		}
		return errors.New("File exists")
	}
	if d, ok := v.stat(path.Dir(p)); !ok && !parents {
		return ErrNotExist
	} else if ok && !d.dir {
		return ErrNotDir
	}
	if v.readOnly(p) {
		return ErrReadOnly
	}
	return v.put(p, &file{dir: true, mode: 0o755})
}

// Remove removes p (a directory only with recursive, or when empty).
func (v *View) Remove(p string, recursive bool) error {
	x, ok := v.stat(p)
	if !ok {
		return ErrNotExist
	}
	if v.readOnly(p) || x.readOnly {
		return ErrReadOnly
	}
	if _, static := v.static[p]; static {
		return errors.New("Device or resource busy")
	}
	under := v.under(p)
	if x.dir && len(under) > 1 && !recursive {
		return ErrNotEmpty
	}
	v.fs.mu.Lock()
	defer v.fs.mu.Unlock()
	for _, q := range under {
		if f, ok := v.fs.files[v.key][q]; ok {
			v.fs.used -= int64(len(f.data))
			delete(v.fs.files[v.key], q)
		}
	}
	return nil
}

// put stores f at p, creating its parent directories; it fails when the
// files would pass the bound or a parent is a file.
func (v *View) put(p string, f *file) error {
	fsys := v.fs
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	files := fsys.files[v.key]
	if files == nil {
		files = map[string]*file{}
		fsys.files[v.key] = files
	}
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if old, ok := files[d]; ok && !old.dir {
			return ErrNotDir
		}
		if old, ok := v.static[d]; ok && !old.dir {
			return ErrNotDir
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
	if fsys.used+delta > fsys.max {
		return ErrNoSpace
	}
	fsys.used += delta
	files[p] = f
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if _, ok := v.static[d]; ok {
			continue
		}
		if _, ok := files[d]; !ok {
			files[d] = &file{dir: true, mode: 0o755}
		}
	}
	return nil
}

// under is the written paths at and below p, sorted (a directory before
// its contents).
func (v *View) under(p string) []string {
	v.fs.mu.Lock()
	defer v.fs.mu.Unlock()
	var out []string
	prefix := strings.TrimSuffix(p, "/") + "/"
	for q := range v.fs.files[v.key] {
		if q == p || strings.HasPrefix(q, prefix) {
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}

// walk is every path at and below p the container sees (static and
// written), sorted.
func (v *View) walk(p string) []string {
	set := map[string]bool{}
	prefix := strings.TrimSuffix(p, "/") + "/"
	for q := range v.static {
		if q == p || strings.HasPrefix(q, prefix) {
			set[q] = true
		}
	}
	for _, q := range v.under(p) {
		set[q] = true
	}
	out := make([]string, 0, len(set))
	for q := range set {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

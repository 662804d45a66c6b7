package simshell

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// The interpreter's files are the container's.

// simFile is an open file of the interpreter (a redirection): reads come
// from its content when opened, writes are kept until Close writes them.
type simFile struct {
	r      *bytes.Reader
	w      bytes.Buffer
	write  func([]byte) error
	closed bool
}

func (f *simFile) Read(b []byte) (int, error) {
	if f.r == nil {
		return 0, io.EOF
	}
	return f.r.Read(b)
}

func (f *simFile) Write(b []byte) (int, error) {
	if f.write == nil {
		return 0, os.ErrPermission
	}
	return f.w.Write(b)
}

func (f *simFile) Close() error {
	if f.closed || f.write == nil {
		f.closed = true
		return nil
	}
	f.closed = true
	return f.write(f.w.Bytes())
}

func (e *cmdEnv) open(ctx context.Context, name string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	if name == "/dev/null" {
		return &simFile{write: func([]byte) error { return nil }}, nil
	}
	p := Clean(interp.HandlerCtx(ctx).Dir, name)
	if flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		b, err := e.v.ReadFile(p)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return &simFile{r: bytes.NewReader(b)}, nil
	}
	app := flag&os.O_APPEND != 0
	// Create (or truncate) it now, as open(2) would.
	if err := e.v.WriteFile(p, nil, app || flag&os.O_TRUNC == 0, perm); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &simFile{write: func(b []byte) error { return e.v.WriteFile(p, b, app, perm) }}, nil
}

type fileInfo struct {
	name string
	f    *file
}

func (i fileInfo) Name() string { return i.name }
func (i fileInfo) Size() int64  { return int64(len(i.f.data)) }
func (i fileInfo) Mode() fs.FileMode {
	if i.f.dir {
		return fs.ModeDir | i.f.mode.Perm()
	}
	return i.f.mode.Perm()
}
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return i.f.dir }
func (i fileInfo) Sys() any           { return nil }

func (e *cmdEnv) statFile(ctx context.Context, name string, _ bool) (fs.FileInfo, error) {
	p := Clean(interp.HandlerCtx(ctx).Dir, name)
	f, ok := e.v.stat(p)
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return fileInfo{path.Base(p), f}, nil
}

func (e *cmdEnv) readDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	p := Clean(interp.HandlerCtx(ctx).Dir, name)
	ents, err := e.v.ReadDir(p)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	out := make([]fs.DirEntry, 0, len(ents))
	for _, en := range ents {
		f, _ := e.v.stat(path.Join(p, en.Name))
		out = append(out, fs.FileInfoToDirEntry(fileInfo{en.Name, f}))
	}
	return out, nil
}

// flags splits args into single-letter options and operands.
func flags(args []string) (map[rune]bool, []string) {
	opts := map[rune]bool{}
	var rest []string
	for i, a := range args {
		if a == "--" {
			return opts, append(rest, args[i+1:]...)
		}
		if len(a) > 1 && a[0] == '-' {
			for _, r := range a[1:] {
				opts[r] = true
			}
			continue
		}
		rest = append(rest, a)
	}
	return opts, rest
}

func cmdTrue(context.Context, *cmdEnv, []string) int  { return 0 }
func cmdFalse(context.Context, *cmdEnv, []string) int { return 1 }

// cmdBuiltin runs one of the interpreter's builtins (echo, printf, test,
// pwd) as a command, for kubectl exec.
func cmdBuiltin(ctx context.Context, e *cmdEnv, args []string) int {
	var words []string
	for _, a := range args {
		q, err := syntax.Quote(a, syntax.LangBash)
		if err != nil {
			fmt.Fprintf(e.eo, "sh: %v\n", err)
			return 2
		}
		words = append(words, q)
	}
	return e.script(ctx, strings.Join(words, " "), nil)
}

func cmdCat(ctx context.Context, e *cmdEnv, args []string) int {
	_, files := flags(args[1:])
	if len(files) == 0 {
		if e.stdin == nil {
			return 0
		}
		if err := copyCtx(ctx, e.out, e.stdin); err != nil {
			return 1
		}
		return 0
	}
	code := 0
	for _, f := range files {
		b, err := e.v.ReadFile(Clean(e.dir, f))
		if err != nil {
			fmt.Fprintf(e.eo, "cat: can't open '%s': %v\n", f, err)
			code = 1
			continue
		}
		e.out.Write(b)
	}
	return code
}

// copyCtx copies r to w until r ends or ctx does; the copy goroutine
// returns when r's Read does (its owner closes it).
func copyCtx(ctx context.Context, w io.Writer, r io.Reader) error {
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, r)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func cmdLs(_ context.Context, e *cmdEnv, args []string) int {
	opts, paths := flags(args[1:])
	if len(paths) == 0 {
		paths = []string{"."}
	}
	code := 0
	long, all := opts['l'], opts['a']
	line := func(name string, en Entry) string {
		if !long {
			return name
		}
		kind := "-"
		if en.Dir {
			kind = "d"
		}
		return fmt.Sprintf("%s%s    1 root     root     %8d Jan  1 00:00 %s", kind, fs.FileMode(en.Mode).Perm().String()[1:], en.Size, name)
	}
	for i, p := range paths {
		abs := Clean(e.dir, p)
		f, ok := e.v.stat(abs)
		if !ok {
			fmt.Fprintf(e.eo, "ls: %s: No such file or directory\n", p)
			code = 1
			continue
		}
		if !f.dir || opts['d'] {
			fmt.Fprintln(e.out, line(p, Entry{Name: p, Dir: f.dir, Mode: f.mode, Size: len(f.data)}))
			continue
		}
		if len(paths) > 1 {
			if i > 0 {
				fmt.Fprintln(e.out)
			}
			fmt.Fprintf(e.out, "%s:\n", p)
		}
		ents, _ := e.v.ReadDir(abs)
		var names []string
		if all {
			names = append(names, line(".", Entry{Dir: true, Mode: 0o755}), line("..", Entry{Dir: true, Mode: 0o755}))
		}
		for _, en := range ents {
			if strings.HasPrefix(en.Name, ".") && !all {
				continue
			}
			names = append(names, line(en.Name, en))
		}
		switch {
		case long:
			fmt.Fprintf(e.out, "total %d\n", len(names))
			fallthrough
		case !e.tty || opts['1']:
			for _, n := range names {
				fmt.Fprintln(e.out, n)
			}
		case len(names) > 0:
			fmt.Fprintln(e.out, strings.Join(names, "  "))
		}
	}
	return code
}

func cmdEnvironment(_ context.Context, e *cmdEnv, args []string) int {
	if len(args) > 1 {
		fmt.Fprintln(e.eo, "env: running a command under env is not simulated")
		return 127
	}
	return printEnv(e, nil)
}

func cmdPrintenv(_ context.Context, e *cmdEnv, args []string) int {
	return printEnv(e, args[1:])
}

func printEnv(e *cmdEnv, names []string) int {
	var vars []string
	e.env.Each(func(name string, vr expand.Variable) bool {
		if vr.Exported && vr.IsSet() {
			vars = append(vars, name+"="+vr.String())
		}
		return true
	})
	slices.Sort(vars)
	if len(names) == 0 {
		for _, kv := range vars {
			fmt.Fprintln(e.out, kv)
		}
		return 0
	}
	code := 0
	for _, n := range names {
		v := e.env.Get(n)
		if !v.IsSet() {
			code = 1
			continue
		}
		fmt.Fprintln(e.out, v.String())
	}
	return code
}

func cmdSleep(ctx context.Context, e *cmdEnv, args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(e.eo, "Usage: sleep [N]...")
		return 1
	}
	s := args[1]
	if s == "infinity" {
		<-ctx.Done()
		return 130
	}
	var d time.Duration
	if n, err := strconv.ParseFloat(s, 64); err == nil && n >= 0 {
		d = time.Duration(n * float64(time.Second))
	} else if d, err = time.ParseDuration(s); err != nil || d < 0 {
		fmt.Fprintf(e.eo, "sleep: invalid number '%s'\n", s)
		return 1
	}
	sleep := e.sh.Sleep
	if sleep == nil {
		sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}
	}
	if sleep(ctx, d) != nil {
		return 130
	}
	return 0
}

func cmdHostname(_ context.Context, e *cmdEnv, args []string) int {
	opts, _ := flags(args[1:])
	if opts['i'] {
		fmt.Fprintln(e.out, e.c.IP)
		return 0
	}
	h := e.env.Get("HOSTNAME").String()
	if h == "" {
		h = e.c.Pod
	}
	fmt.Fprintln(e.out, h)
	return 0
}

func cmdWget(ctx context.Context, e *cmdEnv, args []string) int {
	var out, target string
	quiet := false
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-O" && i+1 < len(args):
			i++
			out = args[i]
		case strings.HasPrefix(a, "-O"):
			out = a[2:]
		case a == "-q" || a == "-qO-":
			quiet = true
			if a == "-qO-" {
				out = "-"
			}
		case (a == "-T" || a == "-U" || a == "--header") && i+1 < len(args):
			i++
		case strings.HasPrefix(a, "-"):
		default:
			target = a
		}
	}
	if target == "" {
		fmt.Fprintln(e.eo, "BusyBox wget: missing URL")
		return 1
	}
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		fmt.Fprintf(e.eo, "wget: bad address '%s'\n", target)
		return 1
	}
	if u.Path == "" {
		u.Path = "/"
		target = u.String()
	}
	if e.sh.Net == nil {
		fmt.Fprintf(e.eo, "wget: bad address '%s' (the simulated runtime has no network here)\n", u.Host)
		return 1
	}
	if !quiet {
		fmt.Fprintf(e.eo, "Connecting to %s\n", u.Host)
	}
	ns := e.c.Namespace
	body, err := e.sh.Net.Get(ctx, ns, target)
	if err != nil {
		fmt.Fprintf(e.eo, "wget: %v\n", err)
		return 1
	}
	if out == "" {
		out = path.Base(u.Path)
		if out == "/" || out == "." || out == "" {
			out = "index.html"
		}
	}
	if out == "-" {
		e.out.Write(body)
		return 0
	}
	if !quiet {
		fmt.Fprintf(e.eo, "saving to '%s'\n", out)
	}
	if err := e.v.WriteFile(Clean(e.dir, out), body, false, 0o644); err != nil {
		fmt.Fprintf(e.eo, "wget: can't open '%s': %v\n", out, err)
		return 1
	}
	if !quiet {
		fmt.Fprintf(e.eo, "'%s' saved\n", out)
	}
	return 0
}

func cmdMkdir(_ context.Context, e *cmdEnv, args []string) int {
	opts, dirs := flags(args[1:])
	code := 0
	for _, d := range dirs {
		if err := e.v.Mkdir(Clean(e.dir, d), opts['p']); err != nil {
			fmt.Fprintf(e.eo, "mkdir: can't create directory '%s': %v\n", d, err)
			code = 1
		}
	}
	return code
}

func cmdRm(_ context.Context, e *cmdEnv, args []string) int {
	opts, paths := flags(args[1:])
	code := 0
	for _, p := range paths {
		abs := Clean(e.dir, p)
		if f, ok := e.v.stat(abs); ok && f.dir && !opts['r'] && !opts['R'] {
			fmt.Fprintf(e.eo, "rm: '%s' is a directory\n", p)
			code = 1
			continue
		}
		if err := e.v.Remove(abs, opts['r'] || opts['R']); err != nil && !(opts['f'] && err == ErrNotExist) {
			fmt.Fprintf(e.eo, "rm: can't remove '%s': %v\n", p, err)
			code = 1
		}
	}
	return code
}

func cmdTouch(_ context.Context, e *cmdEnv, args []string) int {
	_, files := flags(args[1:])
	code := 0
	for _, f := range files {
		if err := e.v.WriteFile(Clean(e.dir, f), nil, true, 0o644); err != nil {
			fmt.Fprintf(e.eo, "touch: %s: %v\n", f, err)
			code = 1
		}
	}
	return code
}

func cmdDate(_ context.Context, e *cmdEnv, _ []string) int {
	fmt.Fprintln(e.out, time.Now().UTC().Format("Mon Jan  2 15:04:05 UTC 2006"))
	return 0
}

func cmdUname(_ context.Context, e *cmdEnv, args []string) int {
	opts, _ := flags(args[1:])
	if opts['a'] {
		fmt.Fprintf(e.out, "Linux %s 6.1.0-podflow-sim #1 SMP x86_64 GNU/Linux\n", e.c.Pod)
		return 0
	}
	fmt.Fprintln(e.out, "Linux")
	return 0
}

func cmdID(_ context.Context, e *cmdEnv, _ []string) int {
	fmt.Fprintln(e.out, "uid=0(root) gid=0(root) groups=0(root)")
	return 0
}

func cmdWhoami(_ context.Context, e *cmdEnv, _ []string) int {
	fmt.Fprintln(e.out, "root")
	return 0
}

// lineCount reads -n N (or -N) for head and tail.
func lineCount(args []string) (int, []string) {
	n := 10
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-n" && i+1 < len(args):
			i++
			n, _ = strconv.Atoi(strings.TrimPrefix(args[i], "+"))
		case strings.HasPrefix(a, "-n"):
			n, _ = strconv.Atoi(a[2:])
		case len(a) > 1 && a[0] == '-':
			if v, err := strconv.Atoi(a[1:]); err == nil {
				n = v
			}
		default:
			rest = append(rest, a)
		}
	}
	return n, rest
}

// input is the content of files, or stdin without any.
func (e *cmdEnv) input(ctx context.Context, name string, files []string) ([]byte, int) {
	if len(files) == 0 {
		if e.stdin == nil {
			return nil, 0
		}
		var b bytes.Buffer
		if err := copyCtx(ctx, &b, io.LimitReader(e.stdin, 16<<20)); err != nil {
			return nil, 1
		}
		return b.Bytes(), 0
	}
	var all []byte
	code := 0
	for _, f := range files {
		b, err := e.v.ReadFile(Clean(e.dir, f))
		if err != nil {
			fmt.Fprintf(e.eo, "%s: %s: %v\n", name, f, err)
			code = 1
			continue
		}
		all = append(all, b...)
	}
	return all, code
}

func cmdHead(ctx context.Context, e *cmdEnv, args []string) int {
	n, files := lineCount(args[1:])
	b, code := e.input(ctx, "head", files)
	lines := strings.SplitAfter(string(b), "\n")
	for i := 0; i < n && i < len(lines); i++ {
		io.WriteString(e.out, lines[i])
	}
	return code
}

func cmdTail(ctx context.Context, e *cmdEnv, args []string) int {
	n, files := lineCount(args[1:])
	b, code := e.input(ctx, "tail", files)
	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(b) == 0 {
		return code
	}
	io.WriteString(e.out, strings.Join(lines[max(0, len(lines)-n):], "")+"\n")
	return code
}

func cmdWc(ctx context.Context, e *cmdEnv, args []string) int {
	opts, files := flags(args[1:])
	b, code := e.input(ctx, "wc", files)
	l, w, c := bytes.Count(b, []byte{'\n'}), len(strings.Fields(string(b))), len(b)
	switch {
	case opts['l']:
		fmt.Fprintln(e.out, l)
	case opts['w']:
		fmt.Fprintln(e.out, w)
	case opts['c']:
		fmt.Fprintln(e.out, c)
	default:
		fmt.Fprintf(e.out, "%7d %7d %7d\n", l, w, c)
	}
	return code
}

func cmdTar(_ context.Context, e *cmdEnv, args []string) int {
	return tarCmd(e.v, e.dir, args[1:], e.stdin, e.out, e.eo)
}

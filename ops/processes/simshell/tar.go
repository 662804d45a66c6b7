package simshell

import (
	"archive/tar"
	"fmt"
	"io"
	"path"
	"strings"
)

// tarCmd answers the tar commands kubectl cp runs: `tar [-]x…f - [-C DIR]`
// extracts stdin's archive into DIR (regular files and directories), and
// `tar [-]c…f - PATH…` writes an archive of each PATH (recursively, names
// without the leading "/", as GNU tar) to stdout. Other options (--no-…)
// are accepted and ignored.
func tarCmd(v *View, dir string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "tar: "+format+"\n", a...)
		return code
	}
	var mode string
	var members []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-C" && i+1 < len(args):
			i++
			dir = Clean(dir, args[i])
		case a == "-" || strings.HasPrefix(a, "--"):
		case mode == "":
			mode = strings.TrimPrefix(a, "-")
		default:
			members = append(members, a)
		}
	}
	switch {
	case strings.Contains(mode, "x"):
		if f, ok := v.stat(dir); !ok || !f.dir {
			return fail(2, "can't change directory to '%s': No such file or directory", dir)
		}
		if stdin == nil {
			return fail(2, "no archive on stdin")
		}
		tr := tar.NewReader(stdin)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return 0
			}
			if err != nil {
				return fail(2, "%v", err)
			}
			p := path.Join(dir, path.Clean("/"+h.Name))
			switch h.Typeflag {
			case tar.TypeDir:
				err = v.Mkdir(p, true)
			case tar.TypeReg:
				// Read at most one byte past the bound: the write then refuses.
				b, rerr := io.ReadAll(io.LimitReader(tr, v.fs.max+1))
				if rerr != nil {
					return fail(2, "%s: %v", h.Name, rerr)
				}
				if err = v.Mkdir(path.Dir(p), true); err == nil {
					err = v.WriteFile(p, b, false, 0o644)
				}
			default:
				fmt.Fprintf(stderr, "tar: %s: skipped (the simulated runtime keeps regular files and directories)\n", h.Name)
				continue
			}
			if err != nil {
				return fail(1, "%s: Cannot write: %v", h.Name, err)
			}
		}
	case strings.Contains(mode, "c"):
		if len(members) == 0 {
			return fail(2, "Cowardly refusing to create an empty archive")
		}
		tw := tar.NewWriter(stdout)
		for _, m := range members {
			p := Clean(dir, m)
			if _, ok := v.stat(p); !ok {
				return fail(2, "%s: Cannot stat: No such file or directory", m)
			}
			for _, q := range v.walk(p) {
				f, ok := v.stat(q)
				if !ok {
					continue // removed meanwhile
				}
				h := &tar.Header{Name: strings.TrimPrefix(q, "/"), Mode: int64(f.mode.Perm()), Typeflag: tar.TypeReg, Size: int64(len(f.data)), Format: tar.FormatPAX}
				if f.dir {
					h.Name += "/"
					h.Typeflag, h.Size = tar.TypeDir, 0
				}
				if err := tw.WriteHeader(h); err != nil {
					return fail(2, "%v", err)
				}
				if _, err := tw.Write(f.data); err != nil {
					return fail(2, "%v", err)
				}
			}
		}
		if err := tw.Close(); err != nil {
			return fail(2, "%v", err)
		}
		return 0
	}
	return fail(2, "You must specify one of the '-c' or '-x' options")
}

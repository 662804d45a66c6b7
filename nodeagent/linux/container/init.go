package container

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/opencontainers/selinux/go-selinux/label"
	"golang.org/x/sys/unix"
)

// runInit is the container's init, PID 1 of the new PID namespace, already
// in the new mount, UTS and IPC namespaces, the pod's network namespace and
// (v2) its cgroup. It sets up the root filesystem and execs the command;
// any failure is written to the exec pipe and the init exits 127.
func runInit(dir string) {
	// Credentials, capabilities, no_new_privs and seccomp are per thread:
	// all of them are set on this one, which execs.
	runtime.LockOSThread()
	execPipe := os.NewFile(initExecFD, "exec")
	if err := initContainer(dir); err != nil {
		fmt.Fprintf(execPipe, "%v", err)
		os.Exit(127)
	}
}

// goByte is what the parent writes on a go pipe once it has placed the
// child in its cgroups; EOF without it means the parent died first (a shim
// SIGKILLed by an abandoned Start), and the child must not run unplaced.
const goByte = 'g'

// awaitGo reads the go pipe f to EOF and closes it: nil when the parent
// wrote goByte.
func awaitGo(f *os.File) error {
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil || len(b) != 1 || b[0] != goByte {
		return fmt.Errorf("not placed in the container's cgroups: the parent went away (%q, %v)", b, err)
	}
	return nil
}

// sendGo lets the child waiting on the go pipe w go on.
func sendGo(w *os.File) error {
	_, err := w.Write([]byte{goByte})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

func initContainer(dir string) error {
	if os.Getenv(envGo) != "" {
		// cgroup v1: wait until the shim has placed us.
		if err := awaitGo(os.NewFile(initGoFD, "go")); err != nil {
			return err
		}
	}
	spec, err := ReadSpec(dir)
	if err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	if err := setupRootfs(spec); err != nil {
		return err
	}
	if spec.Hostname != "" && !spec.HostUTS {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return fmt.Errorf("sethostname: %w", err)
		}
	}
	sec := spec.security()
	wd := spec.WorkingDir
	if wd == "" {
		wd = "/"
	}
	if err := os.MkdirAll(wd, 0o755); err != nil {
		return fmt.Errorf("working dir %q: %w", wd, err)
	}
	if sec.ReadonlyRootfs {
		if err := unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("remount / read-only: %w", err)
		}
	}
	if err := unix.Chdir(wd); err != nil {
		return fmt.Errorf("chdir %q: %w", wd, err)
	}
	id, err := resolveUser(sec)
	if err != nil {
		return err
	}
	env := withHome(spec.Env, id.home)
	argv0, err := lookPath(spec.Args[0], env)
	if err != nil {
		return err
	}
	unix.CloseOnExec(initExecFD)
	if err := applySecurity(sec, id); err != nil {
		return err
	}
	err = unix.Exec(argv0, spec.Args, env)
	return fmt.Errorf("exec %q: %w", spec.Args[0], err)
}

// lookPath finds file in the container's PATH (after pivot_root).
func lookPath(file string, env []string) (string, error) {
	check := func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%q: permission denied", p)
		}
		return nil
	}
	if strings.Contains(file, "/") {
		if err := check(file); err != nil {
			return "", fmt.Errorf("exec: %w", err)
		}
		return file, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if p := filepath.Join(d, file); check(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", file)
}

// setupRootfs builds the container's mount tree and pivot_roots into it.
func setupRootfs(spec Spec) error {
	root := spec.Rootfs
	sec := spec.security()
	// nodev on the root and the volumes of an unprivileged container: a
	// device node made there cannot be opened even where no device cgroup
	// guards (cgroup v2 without a device program).
	var nodev uintptr
	if !sec.Privileged {
		nodev = unix.MS_NODEV
	}
	// Nothing we mount propagates back to the host.
	if err := mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	if spec.Image != "" {
		upper, work := filepath.Join(spec.Dir, "upper"), filepath.Join(spec.Dir, "work")
		for _, d := range []string{upper, work, root} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("overlay directory: %w", err)
			}
		}
		opts := label.FormatMountLabel("lowerdir="+spec.Image+",upperdir="+upper+",workdir="+work, sec.MountLabel)
		if err := mount("podflow-overlay", root, "overlay", nodev, opts); err != nil {
			return err
		}
	} else {
		if err := mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		if nodev != 0 {
			if err := mount("", root, "", unix.MS_BIND|unix.MS_REMOUNT|nodev, ""); err != nil {
				return err
			}
		}
	}
	in := func(p string) (string, error) { return resolveIn(root, p) }
	proc, err := in("/proc")
	if err != nil {
		return err
	}
	if err := mkdirMount(proc, true); err != nil {
		return err
	}
	if err := mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := writeSysctls(proc, spec.Sysctls); err != nil {
		return err
	}
	sys, err := in("/sys")
	if err != nil {
		return err
	}
	if err := mkdirMount(sys, true); err != nil {
		return err
	}
	sysFlags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RDONLY)
	if sec.Privileged {
		sysFlags &^= unix.MS_RDONLY
	}
	if err := mount("sysfs", sys, "sysfs", sysFlags, ""); err != nil {
		return err
	}
	if err := setupDev(root, sec); err != nil {
		return err
	}
	if err := maskPaths(root, sec); err != nil {
		return err
	}
	for _, m := range spec.Mounts {
		// The source (and subPath in it) is resolved once, into a
		// descriptor, and that very file is mounted.
		src, err := openMountSource(m)
		if err != nil {
			return fmt.Errorf("mount source %q (subPath %q): %w", m.Source, m.SubPath, err)
		}
		defer src.Close()
		var st unix.Stat_t
		if err := unix.Fstat(int(src.Fd()), &st); err != nil {
			return fmt.Errorf("mount source %q: %w", m.Source, err)
		}
		dst, err := in(m.Destination)
		if err != nil {
			return err
		}
		if err := mkdirMount(dst, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
			return err
		}
		if err := unix.Mount(fdPath(src), dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mount %s on %q: %w", src.Name(), dst, err)
		}
		if m.ReadOnly || nodev != 0 {
			flags := unix.MS_BIND | unix.MS_REMOUNT | unix.MS_REC | nodev
			if m.ReadOnly {
				flags |= unix.MS_RDONLY
			}
			if err := mount("", dst, "", flags, ""); err != nil {
				return err
			}
		}
	}
	// pivot_root(".", "."): the old root is stacked on top of the new one
	// and detached at once (as runc does), with no directory left behind.
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("chdir %q: %w", root, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root %q: %w", root, err)
	}
	if err := mount("", ".", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return err
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}

// mount is mount(2) with an error that names the mount.
func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %q: %w", fstypeOr(fstype, src), dst, err)
	}
	return nil
}

func fstypeOr(fstype, src string) string {
	if fstype != "" {
		return fstype
	}
	return src
}

// mkdirMount makes a mount point: a directory, or an empty file.
func mkdirMount(p string, dir bool) error {
	if dir {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("mount point %q: %w", p, err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("mount point %q: %w", p, err)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return fmt.Errorf("mount point %q: %w", p, err)
	}
	return f.Close()
}

// errTooManyLinks is returned by resolveIn for symlink loops.
var errTooManyLinks = errors.New("too many levels of symbolic links")

// resolveIn resolves path as if root were "/": symlinks in the rootfs
// (absolute or relative) never lead outside root. Missing components are
// kept as named, so the result can be created.
func resolveIn(root, path string) (string, error) {
	var done string // resolved part, relative to root, "/"-rooted
	rest := strings.Split(filepath.Clean("/"+path), "/")
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			done = filepath.Dir("/" + done)
			continue
		}
		next := filepath.Join(done, c)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > 255 {
			return "", fmt.Errorf("resolve %q in %q: %w", path, root, errTooManyLinks)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			done = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return filepath.Join(root, done), nil
}

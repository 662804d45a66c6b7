package container

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// setupDev mounts the container's /dev: a fresh tmpfs with sec.Devices
// (privileged: every host device), the stdio links, its own devpts (with
// /dev/ptmx pointing into it), shm and mqueue.
func setupDev(root string, sec Security) error {
	dev, err := resolveIn(root, "/dev")
	if err != nil {
		return err
	}
	if err := mkdirMount(dev, true); err != nil {
		return err
	}
	if err := mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_STRICTATIME, "mode=755,size=65536k"); err != nil {
		return err
	}
	devices := sec.Devices
	if sec.Privileged {
		host, err := hostDevices()
		if err != nil {
			return err
		}
		devices = append(devices, host...)
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	for _, d := range devices {
		p := filepath.Join(dev, d.Path)
		if _, err := os.Lstat(p); err == nil {
			continue // privileged: a default device seen again on the host
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("device %q: %w", d.Path, err)
		}
		kind := uint32(unix.S_IFCHR)
		if d.Type == 'b' {
			kind = unix.S_IFBLK
		}
		if err := unix.Mknod(p, kind|d.Mode, int(unix.Mkdev(d.Major, d.Minor))); err != nil {
			return fmt.Errorf("mknod /dev/%s: %w", d.Path, err)
		}
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
		"ptmx": "pts/ptmx", "core": "/proc/kcore",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return fmt.Errorf("symlink /dev/%s: %w", name, err)
		}
	}
	for _, m := range []struct {
		name, fstype, data string
		mode               os.FileMode
		flags              uintptr
	}{
		{"pts", "devpts", "newinstance,ptmxmode=0666,mode=0620,gid=5", 0o755, unix.MS_NOSUID | unix.MS_NOEXEC},
		{"shm", "tmpfs", "mode=1777,size=65536k", 0o1777, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"mqueue", "mqueue", "", 0o755, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
	} {
		p := filepath.Join(dev, m.name)
		if err := os.Mkdir(p, m.mode); err != nil {
			return fmt.Errorf("mount point /dev/%s: %w", m.name, err)
		}
		if err := mount(m.name, p, m.fstype, m.flags, m.data); err != nil {
			return err
		}
	}
	return nil
}

// hostDevices lists the host's device nodes under /dev, except those of
// its own devpts, shm and mqueue (privileged containers get all others).
func hostDevices() ([]Device, error) {
	var out []Device
	err := filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a node that vanished
		}
		rel := strings.TrimPrefix(p, "/dev/")
		if d.IsDir() {
			if rel == "pts" || rel == "shm" || rel == "mqueue" {
				return filepath.SkipDir
			}
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return nil
		}
		var typ byte
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			typ = 'c'
		case unix.S_IFBLK:
			typ = 'b'
		default:
			return nil
		}
		if rel == "ptmx" || rel == "console" {
			return nil
		}
		out = append(out, Device{Path: rel, Type: typ, Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev), Mode: st.Mode & 0o7777})
		return nil
	})
	return out, err
}

// maskPaths hides sec.MaskedPaths (/dev/null over a file, an empty
// read-only tmpfs over a directory) and makes sec.ReadonlyPaths read-only
// bind mounts of themselves, as runc does. Paths missing on this kernel
// are skipped.
func maskPaths(root string, sec Security) error {
	for _, p := range sec.ReadonlyPaths {
		dst, err := resolveIn(root, p)
		if err != nil {
			return err
		}
		if err := mount(dst, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return err
		}
		if err := mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_REC, ""); err != nil {
			return err
		}
	}
	for _, p := range sec.MaskedPaths {
		dst, err := resolveIn(root, p)
		if err != nil {
			return err
		}
		fi, err := os.Stat(dst)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("mask %q: %w", p, err)
		}
		if fi.IsDir() {
			err = mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		} else {
			err = mount("/dev/null", dst, "", unix.MS_BIND, "")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// devicesRootV1 is the cgroup v1 devices hierarchy.
var devicesRootV1 = "/sys/fs/cgroup/devices"

// deviceCgroupV1 makes the container's v1 device cgroup, which denies
// every device but sec's (runc's devices.deny "a", then devices.allow),
// and returns its directory; "" when none is needed or possible: a
// privileged container, a container placed in a cgroup v2 directory (whose
// device guard is the nodev mounts; an eBPF device program is not done
// yet), or a host without the v1 devices hierarchy.
func deviceCgroupV1(spec Spec) (string, error) {
	sec := spec.security()
	if _, v2 := spec.Cgroups[""]; sec.Privileged || v2 {
		return "", nil
	}
	if _, err := os.Stat(filepath.Join(devicesRootV1, "devices.allow")); err != nil {
		return "", nil
	}
	dir := deviceCgroupDirV1(spec)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("device cgroup: %w", err)
	}
	write := func(file, rule string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(rule), 0); err != nil {
			_ = os.Remove(dir)
			return fmt.Errorf("device cgroup %s %q: %w", file, rule, err)
		}
		return nil
	}
	if err := write("devices.deny", "a"); err != nil {
		return "", err
	}
	for _, r := range sec.deviceRules() {
		if err := write("devices.allow", v1DeviceRule(r)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// deviceCgroupDirV1 is where deviceCgroupV1 puts the container's device
// cgroup.
func deviceCgroupDirV1(spec Spec) string {
	return filepath.Join(devicesRootV1, "podflow-dev-"+spec.ID)
}

// RemoveDeviceCgroup removes container id's device cgroup (cgroup v1)
// if it is still there. The shim removes it when the container exits (and
// Start when it gave up on the shim); a shim that was SIGKILLed leaves it
// behind, so the node agent calls this for the containers it no longer
// runs. A cgroup that still holds a process stays (the kernel refuses:
// EBUSY); on cgroup v2 there is nothing to remove.
func RemoveDeviceCgroup(id string) error {
	err := os.Remove(deviceCgroupDirV1(Spec{ID: id}))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// joinCgroup returns cgroups with sub → dir added (a copy).
func joinCgroup(cgroups map[string]string, sub, dir string) map[string]string {
	out := maps.Clone(cgroups)
	if out == nil {
		out = map[string]string{}
	}
	out[sub] = dir
	return out
}

// deviceCgroupRemoveTimeout bounds how long the shim waits for the
// processes left in a device cgroup to exit after SIGKILL. A killed
// process exits as soon as it runs again; only one in uninterruptible
// sleep (a hung filesystem) outlasts this, and then the node agent's
// sweep removes the cgroup later (RemoveDeviceCgroup).
const deviceCgroupRemoveTimeout = 30 * time.Second

// removeDeviceCgroupDir is the shim's removeCgroupDir of the container's
// device cgroup dir: idempotent, bounded by deviceCgroupRemoveTimeout, a
// failure logged (the node agent removes what is left).
func removeDeviceCgroupDir(dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), deviceCgroupRemoveTimeout)
	defer cancel()
	if err := removeCgroupDir(ctx, dir); err != nil {
		fmt.Fprintf(os.Stderr, "device cgroup left for the node agent: %v\n", err)
	}
}

// removeCgroupDir removes the container's cgroup v1 directory dir once its
// init has exited. What is still in it belongs to the container (only the
// init, its descendants and exec'd commands join it): a process the init
// left where its exit does not end the PID namespace (the pod's shared one
// or the host's), or one still being taken down. Those are killed and
// waited for (emptyCgroup), then the directory is removed. ctx bounds the
// wait.
func removeCgroupDir(ctx context.Context, dir string) error {
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("remove cgroup %q: %w", dir, err)
		}
		if werr := emptyCgroup(ctx, dir); werr != nil {
			return fmt.Errorf("remove cgroup %q: %w (%w)", dir, err, werr)
		}
	}
}

// emptyCgroup SIGKILLs the processes in the cgroup v1 directory dir and
// waits until they have exited. Each is named by a pidfd opened while its
// pid is listed in dir and checked to be listed still once opened, so a
// pid reused by a process outside dir is never signalled. The kernel takes
// an exiting task out of its cgroup before it notifies the task's pidfd,
// so once every pidfd is readable dir is empty, unless something was
// forked meanwhile, which the caller's next pass finds. With nothing
// listed (the kernel still holds a task that is leaving), it waits a
// moment and returns.
func emptyCgroup(ctx context.Context, dir string) error {
	procs := filepath.Join(dir, "cgroup.procs")
	pids, err := readPIDs(procs)
	if errors.Is(err, os.ErrNotExist) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
			return nil
		}
	}
	fds := make(map[int]*os.File, len(pids))
	defer func() {
		for _, f := range fds {
			f.Close()
		}
	}()
	for _, pid := range pids {
		if f, err := openProcess(pid, 0); err == nil {
			fds[pid] = f
		}
	}
	still, err := readPIDs(procs)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, pid := range still {
		if f := fds[pid]; f != nil {
			if err := sendSignal(f, unix.SIGKILL); err != nil && !errors.Is(err, ErrNotRunning) {
				return fmt.Errorf("kill %d: %w", pid, err)
			}
		}
	}
	for _, pid := range still {
		if f := fds[pid]; f != nil {
			if err := waitExit(ctx, f); err != nil {
				return fmt.Errorf("wait for %d: %w", pid, err)
			}
		}
	}
	return nil
}

// readPIDs reads a cgroup.procs file.
func readPIDs(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

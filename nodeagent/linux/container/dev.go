package container

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
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
// if it is still there. The shim removes it when the container exits; a
// shim that was SIGKILLed leaves it behind, so the node agent calls this
// when it removes the container. A cgroup that still holds a process
// stays (the kernel refuses), as does nothing on cgroup v2.
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

// removeCgroupDir removes an emptied cgroup, waiting briefly for the
// kernel to finish with its last process.
func removeCgroupDir(dir string) {
	for i := 0; i < 100; i++ {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

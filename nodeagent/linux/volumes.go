package linux

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/container"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Default file modes of projected volumes.
const (
	configMapMode   = 0o644
	secretMode      = 0o400
	downwardAPIMode = 0o644
)

func (r *Runtime) volumeDir(p *pod, name string) string { return filepath.Join(p.dir, "volumes", name) }

// MountVolumes implements nodeagent.Runtime: emptyDir volumes are
// directories under the pod's directory (a tmpfs for medium Memory);
// configMap, secret, downwardAPI and projected volumes are written by the atomic
// writer (kubelet's ..data layout: ..data swapped to a new timestamped
// directory on each change, see writeAtomic), secrets and downwardAPI on a
// tmpfs (never on disk; projected too), with their items' mode, the volume's
// defaultMode, or 0644 (0400 for secrets); hostPath volumes must lie
// under Config.HostPathPrefixes. It may be called again, with some of the
// volumes, to refresh their files: a running container sees the new set
// through its mount of the volume, all at once; a subPath mount (bound
// to one file or directory of the old set) keeps what it had, as in
// Kubernetes.
func (r *Runtime) MountVolumes(ctx context.Context, pd *corev1.Pod, vols []nodeagent.VolumeData) error {
	p := r.pod(pd.GetMetadata().GetUid())
	if p == nil {
		return nodeagent.Errorf(nodeagent.CodeMount, "pod %q has no sandbox", pd.GetMetadata().GetUid())
	}
	for _, vd := range vols {
		if err := ctx.Err(); err != nil {
			return err
		}
		v := vd.Volume
		if err := r.mountVolume(p, vd, pd.GetSpec().GetSecurityContext()); err != nil {
			return nodeagent.Errorf(nodeagent.CodeMount, "MountVolume.SetUp failed for volume %q : %w", v.GetName(), err)
		}
	}
	r.mu.Lock()
	p.rec.VolumesReady = true
	err := r.savePod(p)
	r.mu.Unlock()
	if err != nil {
		return nodeagent.Errorf(nodeagent.CodeMount, "record volumes: %w", err)
	}
	return nil
}

func (r *Runtime) mountVolume(p *pod, vd nodeagent.VolumeData, psc *corev1.PodSecurityContext) error {
	v, files := vd.Volume, vd.Files
	fsGroup, policy := fsGroupOf(psc), psc.GetFsGroupChangePolicy()
	if !validName(v.GetName()) {
		return fmt.Errorf("bad volume name %q", v.GetName())
	}
	dir := r.volumeDir(p, v.GetName())
	switch {
	case v.GetEmptyDir() != nil:
		// kubelet's setupDir: a 0777 directory, chmod'ed past the umask
		// (any user of the pod may write into it).
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			return err
		}
		if v.GetEmptyDir().GetMedium() == "Memory" {
			// kubelet's setupTmpfs: sized as the agent sized it
			// (VolumeData.MemorySize), a 0777 directory as on disk.
			if err := r.ensureTmpfs(p, dir, "podflow-emptydir", tmpfsOptions("0777", vd.MemorySize)); err != nil {
				return err
			}
		}
		return applyFSGroup(dir, fsGroup, policy, false)
	case v.GetConfigMap() != nil:
		src := v.GetConfigMap()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := writeAtomic(dir, payload(files, itemModes(src.GetItems(), src.DefaultMode, configMapMode))); err != nil {
			return err
		}
		return applyFSGroup(dir, fsGroup, policy, true)
	case v.GetSecret() != nil:
		src := v.GetSecret()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := r.ensureTmpfs(p, dir, "podflow-secret", tmpfsOptions("0755", vd.MemorySize)); err != nil {
			return err
		}
		if err := writeAtomic(dir, payload(files, itemModes(src.GetItems(), src.DefaultMode, secretMode))); err != nil {
			return err
		}
		return applyFSGroup(dir, fsGroup, policy, true)
	case v.GetDownwardApi() != nil:
		// kubelet wraps a downwardAPI volume in a memory emptyDir.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := r.ensureTmpfs(p, dir, "podflow-downwardapi", tmpfsOptions("0755", vd.MemorySize)); err != nil {
			return err
		}
		if err := writeAtomic(dir, downwardAPIPayload(v.GetDownwardApi(), files)); err != nil {
			return err
		}
		return applyFSGroup(dir, fsGroup, policy, true)
	case v.GetProjected() != nil:
		// kubelet's projected plugin also wraps a memory emptyDir; the
		// agent resolved each file's mode (VolumeData.Modes).
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := r.ensureTmpfs(p, dir, "podflow-projected", tmpfsOptions("0755", vd.MemorySize)); err != nil {
			return err
		}
		mode := func(path string) os.FileMode {
			if m, ok := vd.Modes[path]; ok {
				return os.FileMode(m) & 0o777
			}
			return nodeagent.DefaultProjectedMode
		}
		if err := writeAtomic(dir, payload(files, mode)); err != nil {
			return err
		}
		return applyFSGroup(dir, fsGroup, policy, true)
	case v.GetHostPath() != nil:
		_, _, err := r.hostPath(v.GetHostPath())
		return err
	default:
		return errors.New("unsupported volume type (podflow supports emptyDir, configMap, secret, downwardAPI, projected, hostPath)")
	}
}

// hostPath checks a hostPath volume against the allowed prefixes (after
// resolving symlinks) and creates it for type DirectoryOrCreate. readOnly
// is true when only read-only prefixes (HostPathReadOnlySuffix) allow it:
// every mount of it is then read-only, and nothing is created under them.
func (r *Runtime) hostPath(src *corev1.HostPathVolumeSource) (real string, readOnly bool, err error) {
	path := filepath.Clean(src.GetPath())
	if !filepath.IsAbs(path) {
		return "", false, fmt.Errorf("hostPath %q is not absolute", src.GetPath())
	}
	if ok, ro := r.allowed(path); src.GetType() == "DirectoryOrCreate" && ok && !ro {
		if err := os.MkdirAll(path, 0o755); err != nil {
			return "", false, err
		}
	}
	real, err = filepath.EvalSymlinks(path)
	if err != nil {
		return "", false, fmt.Errorf("hostPath %q: %w", path, err)
	}
	ok, ro := r.allowed(real)
	if !ok {
		return "", false, fmt.Errorf("hostPath %q: %w (allowed: %v)", path, ErrHostPathNotAllowed, r.cfg.HostPathPrefixes)
	}
	return real, ro, nil
}

// allowed reports whether a prefix of HostPathPrefixes allows path, and
// whether only read-only ones do.
func (r *Runtime) allowed(path string) (ok, readOnly bool) {
	readOnly = true
	for _, entry := range r.cfg.HostPathPrefixes {
		pre, ro := SplitHostPathPrefix(entry)
		if path == pre || strings.HasPrefix(path, pre+"/") {
			ok, readOnly = true, readOnly && ro
		}
	}
	return ok, ok && readOnly
}

// SplitHostPathPrefix splits an entry of Config.HostPathPrefixes into its
// cleaned path and whether it allows read-only mounts only (the entry ends
// in HostPathReadOnlySuffix).
func SplitHostPathPrefix(entry string) (path string, readOnly bool) {
	path, readOnly = strings.CutSuffix(entry, HostPathReadOnlySuffix)
	return filepath.Clean(path), readOnly
}

// tmpfsOptions are the mount options of a volume's tmpfs: a directory of
// mode (octal) and size bytes (VolumeData.MemorySize; 0: the kernel's
// default). A secret, downwardAPI or projected volume's is 0755, sized as
// kubelet sizes its wrapping memory emptyDir.
func tmpfsOptions(mode string, size int64) string {
	opts := "mode=" + mode
	if size > 0 {
		opts += fmt.Sprintf(",size=%d", size)
	}
	return opts
}

// ensureTmpfs mounts a tmpfs with opts at dir unless one is there, and
// records it for removal with the pod.
func (r *Runtime) ensureTmpfs(p *pod, dir, source, opts string) error {
	r.mu.Lock()
	mounted := slices.Contains(p.rec.Mounts, dir)
	r.mu.Unlock()
	if mounted {
		return nil
	}
	if err := unix.Mount(source, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %q: %w", dir, err)
	}
	r.mu.Lock()
	p.rec.Mounts = append(p.rec.Mounts, dir)
	err := r.savePod(p)
	r.mu.Unlock()
	return err
}

// downwardAPIPayload gives each resolved file its item's mode, else the
// volume's defaultMode, else 0644.
func downwardAPIPayload(src *corev1.DownwardAPIVolumeSource, files map[string][]byte) map[string]projection {
	out := make(map[string]projection, len(files))
	for path, data := range files {
		mode := os.FileMode(downwardAPIMode)
		if src.DefaultMode != nil {
			mode = os.FileMode(*src.DefaultMode) & 0o777
		}
		for _, it := range src.GetItems() {
			if filepath.Clean(it.GetPath()) == path && it.Mode != nil {
				mode = os.FileMode(*it.Mode) & 0o777
			}
		}
		out[path] = projection{data: data, mode: mode}
	}
	return out
}

func itemModes(items []*corev1.KeyToPath, def *int32, fallback os.FileMode) func(string) os.FileMode {
	return func(path string) os.FileMode {
		for _, it := range items {
			if it.GetPath() == path && it.Mode != nil {
				return os.FileMode(*it.Mode) & 0o777
			}
		}
		if def != nil {
			return os.FileMode(*def) & 0o777
		}
		return fallback
	}
}

// payload gives each file of a configMap or secret volume its mode for
// the atomic writer (which checks the paths).
func payload(files map[string][]byte, mode func(string) os.FileMode) map[string]projection {
	out := make(map[string]projection, len(files))
	for name, data := range files {
		out[name] = projection{data: data, mode: mode(name)}
	}
	return out
}

func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// containerMounts returns the bind mounts of c: its volumeMounts (with
// subPath), the pod's /etc/hosts and its /etc/resolv.conf (each unless a
// volumeMount covers it).
func (r *Runtime) containerMounts(pd *corev1.Pod, c *corev1.Container, p *pod) ([]container.Mount, error) {
	vols := map[string]*corev1.Volume{}
	for _, v := range pd.GetSpec().GetVolumes() {
		vols[v.GetName()] = v
	}
	var out []container.Mount
	hosts, resolv := true, true
	for _, vm := range c.GetVolumeMounts() {
		v := vols[vm.GetName()]
		if v == nil {
			return nil, nodeagent.Errorf(nodeagent.CodeCreateContainer, "volumeMount %q: no such volume", vm.GetName())
		}
		src := r.volumeDir(p, v.GetName())
		readOnly := vm.GetReadOnly()
		if hp := v.GetHostPath(); hp != nil {
			real, ro, err := r.hostPath(hp)
			if err != nil {
				return nil, nodeagent.Errorf(nodeagent.CodeCreateContainer, "volumeMount %q: %w", vm.GetName(), err)
			}
			src, readOnly = real, readOnly || ro
		}
		var sub string
		if sp := vm.GetSubPath(); sp != "" {
			// kubelet's validation; the resolution itself is the init's
			// (container.Mount.SubPath: openat2 RESOLVE_IN_ROOT under the
			// volume, mounted through the descriptor).
			sub = filepath.Clean(sp)
			if filepath.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, "../") {
				return nil, nodeagent.Errorf(nodeagent.CodeCreateContainer, "volumeMount %q: subPath %q escapes the volume", vm.GetName(), sp)
			}
			// A missing subPath is made a directory, as kubelet does,
			// resolved in the volume the same way.
			if err := container.MkdirInRoot(src, sub); err != nil {
				return nil, nodeagent.Errorf(nodeagent.CodeCreateContainer, "volumeMount %q: subPath %q: %w", vm.GetName(), sp, err)
			}
		}
		switch filepath.Clean(vm.GetMountPath()) {
		case "/etc/hosts":
			hosts = false
		case "/etc/resolv.conf":
			resolv = false
		}
		out = append(out, container.Mount{Source: src, SubPath: sub, Destination: vm.GetMountPath(), ReadOnly: readOnly,
			Volume: v.GetHostPath() == nil})
	}
	if hosts {
		out = append(out, container.Mount{Source: filepath.Join(p.dir, "hosts"), Destination: "/etc/hosts"})
	}
	// A pod made before pods got a resolv.conf keeps the image's.
	if _, err := os.Stat(filepath.Join(p.dir, "resolv.conf")); resolv && err == nil {
		out = append(out, container.Mount{Source: filepath.Join(p.dir, "resolv.conf"), Destination: "/etc/resolv.conf"})
	}
	return out, nil
}

var _ nodeagent.VolumeMeter = (*Runtime)(nil)

// VolumeUsage implements nodeagent.VolumeMeter: the bytes the volume's
// files take, counted as kubelet's du (pkg/volume/util/fs DiskUsage):
// every inode once, its blocks (st_blocks × 512), never crossing into
// another filesystem (a mount inside the volume).
func (r *Runtime) VolumeUsage(ctx context.Context, pd *corev1.Pod, name string) (int64, error) {
	p := r.pod(pd.GetMetadata().GetUid())
	if p == nil {
		return 0, fmt.Errorf("pod %q has no sandbox", pd.GetMetadata().GetUid())
	}
	if !validName(name) {
		return 0, fmt.Errorf("bad volume name %q", name)
	}
	dir := r.volumeDir(p, name)
	var root unix.Stat_t
	if err := unix.Lstat(dir, &root); err != nil {
		return 0, fmt.Errorf("volume %q: %w", name, err)
	}
	seen := map[uint64]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // removed while walked
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		total += st.Blocks * 512
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("volume %q usage: %w", name, err)
	}
	return total, nil
}

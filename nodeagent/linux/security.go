package linux

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/openat2"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Seccomp profile types (securityContext.seccompProfile.type).
const (
	seccompRuntimeDefault = "RuntimeDefault"
	seccompUnconfined     = "Unconfined"
	seccompLocalhost      = "Localhost"
)

// seccompOptions are the node's seccomp settings (Config.SeccompDefault,
// Config.SeccompProfileRoot).
type seccompOptions struct {
	defaultRuntime bool   // kubelet --seccomp-default
	root           string // kubelet --seccomp-profile-root
	selinux        bool   // SELinux is enabled on this machine (seLinuxEnabled)
}

// containerSecurity derives what container c of pd may do from
// container.DefaultSecurity, one securityContext field at a time, in
// kubelet's and containerd's order. imageUser is the image's USER. The
// error is CreateContainerConfigError for a runAsNonRoot violation (with
// kubelet's message) and CreateContainerError otherwise.
func containerSecurity(pd *corev1.Pod, c *corev1.Container, imageUser string, opts seccompOptions) (*container.Security, error) {
	psc, sc := pd.GetSpec().GetSecurityContext(), c.GetSecurityContext()
	if err := verifyRunAsNonRoot(pd, c, imageUser); err != nil {
		return nil, nodeagent.Errorf(nodeagent.CodeCreateContainerConfig, "%w", err)
	}
	sec := container.DefaultSecurity()
	if err := withIdentity(&sec, psc, sc, imageUser); err != nil {
		return nil, nodeagent.Errorf(nodeagent.CodeCreateContainerConfig, "%w", err)
	}
	if err := withCapabilities(&sec, sc.GetCapabilities()); err != nil {
		return nil, nodeagent.Errorf(nodeagent.CodeCreateContainer, "%w", err)
	}
	withPrivileged(&sec, sc.GetPrivileged())
	withProcMount(&sec, sc.GetProcMount())
	sec.ReadonlyRootfs = sc.GetReadOnlyRootFilesystem()
	sec.NoNewPrivileges = noNewPrivileges(sc)
	if err := withSeccomp(&sec, effectiveSeccomp(psc, sc), opts); err != nil {
		return nil, nodeagent.Errorf(nodeagent.CodeCreateContainer, "%w", err)
	}
	if err := withSELinux(&sec, effectiveSELinux(psc, sc), opts.selinux); err != nil {
		return nil, nodeagent.Errorf(nodeagent.CodeCreateContainer, "%w", err)
	}
	return &sec, nil
}

// effectiveUser is the container's runAsUser, else the pod's.
func effectiveUser(psc *corev1.PodSecurityContext, sc *corev1.SecurityContext) *int64 {
	if sc != nil && sc.RunAsUser != nil {
		return sc.RunAsUser
	}
	if psc != nil {
		return psc.RunAsUser
	}
	return nil
}

// verifyRunAsNonRoot is kubelet's check (kuberuntime
// security_context_others.go), made before the container is created:
// with runAsNonRoot, the effective uid must be known and non-zero.
func verifyRunAsNonRoot(pd *corev1.Pod, c *corev1.Container, imageUser string) error {
	psc, sc := pd.GetSpec().GetSecurityContext(), c.GetSecurityContext()
	nonRoot := psc.GetRunAsNonRoot()
	if sc != nil && sc.RunAsNonRoot != nil {
		nonRoot = sc.GetRunAsNonRoot()
	}
	if !nonRoot {
		return nil
	}
	m := pd.GetMetadata()
	podName := fmt.Sprintf("%s_%s(%s)", m.GetName(), m.GetNamespace(), m.GetUid()) // kubelet's format.Pod
	if u := effectiveUser(psc, sc); u != nil {
		if *u == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podName, c.GetName())
		}
		return nil
	}
	name, _, _ := strings.Cut(imageUser, ":")
	uid, err := strconv.ParseInt(name, 10, 64)
	switch {
	case name == "":
		uid = 0 // no USER: kubelet treats it as root
	case err != nil:
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", name, podName, c.GetName())
	}
	if uid == 0 {
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podName, c.GetName())
	}
	return nil
}

// idInRange refuses an id the kernel's uid_t/gid_t cannot hold as
// Kubernetes allows them (0 to 2^31-1): -1 would become 4294967295.
func idInRange(what string, id int64) error {
	if id < 0 || id > 1<<31-1 {
		return fmt.Errorf("%s %d is out of range", what, id)
	}
	return nil
}

// withIdentity: runAsUser (container, else pod) replaces the image's USER;
// runAsGroup replaces the group; fsGroup and supplementalGroups are
// additional groups (in kubelet's order).
func withIdentity(sec *container.Security, psc *corev1.PodSecurityContext, sc *corev1.SecurityContext, imageUser string) error {
	sec.User = imageUser
	if u := effectiveUser(psc, sc); u != nil {
		if err := idInRange("runAsUser", *u); err != nil {
			return err
		}
		sec.User = strconv.FormatInt(*u, 10)
	}
	var g *int64
	if psc != nil {
		g = psc.RunAsGroup
	}
	if sc != nil && sc.RunAsGroup != nil {
		g = sc.RunAsGroup
	}
	if g != nil {
		if err := idInRange("runAsGroup", *g); err != nil {
			return err
		}
		gid := uint32(*g)
		sec.GID = &gid
	}
	var groups []int64
	if fg := fsGroupOf(psc); fg != nil {
		groups = append(groups, *fg)
	}
	groups = append(groups, psc.GetSupplementalGroups()...)
	for _, g := range groups {
		if err := idInRange("group", g); err != nil {
			return err
		}
		if !slices.Contains(sec.AdditionalGids, uint32(g)) {
			sec.AdditionalGids = append(sec.AdditionalGids, uint32(g))
		}
	}
	return nil
}

// withCapabilities applies add and drop as containerd does: "ALL" in add,
// then "ALL" in drop, then each named add, then each named drop.
func withCapabilities(sec *container.Security, caps *corev1.Capabilities) error {
	if caps == nil {
		return nil
	}
	isAll := func(s string) bool { return strings.EqualFold(s, "ALL") }
	if slices.ContainsFunc(caps.GetAdd(), isAll) {
		sec.Capabilities = container.AllCapabilities()
	}
	if slices.ContainsFunc(caps.GetDrop(), isAll) {
		sec.Capabilities = nil
	}
	for _, a := range caps.GetAdd() {
		if isAll(a) {
			continue
		}
		n, err := container.ParseCapability(a)
		if err != nil {
			return err
		}
		if !slices.Contains(sec.Capabilities, n) {
			sec.Capabilities = append(sec.Capabilities, n)
		}
	}
	for _, d := range caps.GetDrop() {
		if isAll(d) {
			continue
		}
		n, err := container.ParseCapability(d)
		if err != nil {
			return err
		}
		sec.Capabilities = slices.DeleteFunc(sec.Capabilities, func(c string) bool { return c == n })
	}
	return nil
}

// withPrivileged: every capability, every host device, a writable /sys,
// nothing masked or read-only in /proc (seccomp: see withSeccomp).
func withPrivileged(sec *container.Security, privileged bool) {
	if !privileged {
		return
	}
	sec.Privileged = true
	sec.Capabilities = container.AllCapabilities()
	sec.MaskedPaths, sec.ReadonlyPaths = nil, nil
}

// withProcMount: "Unmasked" shows /proc whole, as kubelet's
// ConvertToRuntimeMaskedPaths.
func withProcMount(sec *container.Security, procMount string) {
	if procMount == "Unmasked" {
		sec.MaskedPaths, sec.ReadonlyPaths = nil, nil
	}
}

// noNewPrivileges is kubelet's AddNoNewPrivileges: set exactly when
// allowPrivilegeEscalation is explicitly false.
func noNewPrivileges(sc *corev1.SecurityContext) bool {
	return sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
}

// effectiveSeccomp is the container's seccompProfile, else the pod's.
func effectiveSeccomp(psc *corev1.PodSecurityContext, sc *corev1.SecurityContext) *corev1.SeccompProfile {
	if p := sc.GetSeccompProfile(); p != nil {
		return p
	}
	return psc.GetSeccompProfile()
}

// withSeccomp compiles the profile: RuntimeDefault (moby's default for the
// container's capabilities), Localhost (a file under opts.root), or none
// for Unconfined, for a privileged container (as containerd), and when
// unset unless opts.defaultRuntime (kubelet --seccomp-default).
func withSeccomp(sec *container.Security, p *corev1.SeccompProfile, opts seccompOptions) error {
	typ := p.GetType()
	if typ == "" && opts.defaultRuntime {
		typ = seccompRuntimeDefault
	}
	if sec.Privileged {
		typ = seccompUnconfined
	}
	var prof *specs.LinuxSeccomp
	var err error
	switch typ {
	case "", seccompUnconfined:
		return nil
	case seccompRuntimeDefault:
		prof, err = container.RuntimeDefaultSeccomp(sec.Capabilities)
	case seccompLocalhost:
		rel := p.GetLocalhostProfile()
		path := filepath.Join(opts.root, rel)
		if rel == "" || !strings.HasPrefix(path, filepath.Clean(opts.root)+"/") {
			return fmt.Errorf("seccomp localhost profile %q must name a file under %q", rel, opts.root)
		}
		prof, err = container.LoadSeccompProfile(path, sec.Capabilities)
	default:
		return fmt.Errorf("seccomp profile type %q is not RuntimeDefault, Unconfined or Localhost", typ)
	}
	if err != nil {
		return err
	}
	sec.Seccomp, err = container.CompileSeccomp(prof)
	return err
}

// rootMismatch reports whether a volume's root lacks fsGroup's ownership:
// another group, not a directory, not group mask|search, or no setgid.
func rootMismatch(dir string, fsGroup int64, mask fs.FileMode) bool {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int64(st.Gid) != fsGroup {
		return true
	}
	want := mask | 0o110
	return fi.Mode().Perm()&want != want || fi.Mode()&fs.ModeSetgid == 0
}

// fsGroupOf is the pod's fsGroup (nil: none).
func fsGroupOf(psc *corev1.PodSecurityContext) *int64 {
	if psc == nil {
		return nil
	}
	return psc.FsGroup
}

// fsGroupOnRootMismatch is the fsGroupChangePolicy that skips a volume
// whose root is already owned (the other, the default, is Always).
const fsGroupOnRootMismatch = "OnRootMismatch"

// applyFSGroup gives the files of a volume the group fsGroup, as kubelet's
// SetVolumeOwnership: files get group read (and write unless readOnly),
// directories also group search and setgid, so new files inherit the
// group. With fsGroupChangePolicy Always (or unset) every file, every
// time; with OnRootMismatch nothing when the volume's root already has
// the group, those permissions and setgid (kubelet's
// requiresPermissionChange), so a large volume is not walked at every
// mount.
func applyFSGroup(dir string, fsGroup *int64, policy string, readOnly bool) error {
	if fsGroup == nil {
		return nil
	}
	mask := fs.FileMode(0o660)
	if readOnly {
		mask = 0o440
	}
	if policy == fsGroupOnRootMismatch && !rootMismatch(dir, *fsGroup, mask) {
		return nil
	}
	root, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer root.Close()
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // configMap/secret ..data links: their targets are walked
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		return setGroupBeneath(root, rel, int(*fsGroup), mask)
	})
}

// setGroupBeneath gives rel, under root, the group gid and mask (plus
// search and setgid on a directory). It works on the inode it opened —
// beneath root, through no symlink — so a container that swaps an entry
// for a symlink while the volume is walked cannot point the change at a
// file outside it.
func setGroupBeneath(root *os.File, rel string, gid int, mask fs.FileMode) error {
	fd, err := openat2.Open(int(root.Fd()), rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EXDEV) {
		return nil // became a symlink, or went away, while walking: not ours to change
	}
	if err != nil {
		return fmt.Errorf("open %q in the volume: %w", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	var mode uint32
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		mode = st.Mode&0o7777 | uint32(mask)
	case unix.S_IFDIR:
		mode = st.Mode&0o7777 | uint32(mask) | unix.S_ISGID | 0o110
	default:
		return nil // devices, fifos, sockets, links: left alone
	}
	// The inode opened, not a path resolved again: fchownat of the
	// descriptor itself (an lchown of its /proc/self/fd link would change
	// the link, not the file), and a chmod through the link, which follows it.
	if err := unix.Fchownat(fd, "", -1, gid, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("chown %q in the volume: %w", rel, err)
	}
	return os.Chmod("/proc/self/fd/"+strconv.Itoa(fd), fs.FileMode(mode&0o777)|modeBits(mode))
}

// modeBits is the setuid, setgid and sticky bits of a Unix mode as Go's.
func modeBits(m uint32) fs.FileMode {
	var b fs.FileMode
	if m&unix.S_ISUID != 0 {
		b |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		b |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		b |= fs.ModeSticky
	}
	return b
}

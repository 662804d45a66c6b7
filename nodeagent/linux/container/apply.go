package container

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"github.com/moby/sys/capability"
	"github.com/moby/sys/user"
	"github.com/opencontainers/selinux/go-selinux"
	"golang.org/x/sys/unix"
)

// identity is the resolved user of the process.
type identity struct {
	uid, gid int
	groups   []int // supplementary groups, the primary first
	home     string
}

// resolveUser resolves s.User in the container's /etc/passwd and
// /etc/group (called after pivot_root), as runc and containerd do.
func resolveUser(s Security) (identity, error) {
	spec := s.User
	if spec == "" {
		spec = "0"
	}
	eu, err := user.GetExecUserPath(spec, &user.ExecUser{Home: "/"}, "/etc/passwd", "/etc/group")
	if err != nil {
		return identity{}, fmt.Errorf("user %q: %w", s.User, err)
	}
	id := identity{uid: eu.Uid, gid: eu.Gid, home: eu.Home}
	if s.GID != nil {
		id.gid = int(*s.GID)
	}
	id.groups = []int{id.gid}
	for _, g := range eu.Sgids {
		id.groups = appendNew(id.groups, g)
	}
	for _, g := range s.AdditionalGids {
		id.groups = appendNew(id.groups, int(g))
	}
	return id, nil
}

func appendNew(s []int, v int) []int {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// withHome adds HOME (the user's home directory) unless env has it, as
// runc does.
func withHome(env []string, home string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "HOME=") {
			return env
		}
	}
	if home == "" {
		home = "/"
	}
	return append(slices.Clone(env), "HOME="+home)
}

// applySecurity gives the calling thread (locked; it execs next) exactly
// the privileges s grants, in runc's order: file descriptors beyond
// stdio close on exec; rlimits; a seccomp filter without no_new_privs is
// loaded first (it needs CAP_SYS_ADMIN); the bounding set is dropped while
// root still holds CAP_SETPCAP; setgroups, setresgid, setresuid with
// PR_SET_KEEPCAPS, so the permitted set survives the uid change; then the
// permitted, effective and (empty) inheritable and ambient sets;
// no_new_privs; and the seccomp filter last, so that only execve runs
// under it. The raw syscalls act on this thread only, which is the one
// that execs.
func applySecurity(s Security, id identity) error {
	// Nothing but stdio crosses the exec (the exec pipe is already
	// close-on-exec).
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close_range: %w", err)
	}
	for _, rl := range s.Rlimits {
		if err := unix.Setrlimit(rl.Resource, &unix.Rlimit{Cur: rl.Soft, Max: rl.Hard}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", rl.Resource, err)
		}
	}
	if s.ProcessLabel != "" { // the label of what this thread execs, as runc
		if err := selinux.SetExecLabel(s.ProcessLabel); err != nil {
			return fmt.Errorf("SELinux exec label %q: %w", s.ProcessLabel, err)
		}
	}
	if !s.NoNewPrivileges {
		if err := loadSeccomp(s.Seccomp); err != nil {
			return err
		}
	}
	caps, err := capability.NewPid2(0)
	if err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	if err := caps.Load(); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	want := make([]capability.Cap, 0, len(s.Capabilities))
	for _, name := range s.Capabilities {
		c, ok := capByName[name]
		if !ok {
			return fmt.Errorf("unknown capability %q", name)
		}
		want = append(want, c)
	}
	caps.Clear(capability.BOUNDS)
	caps.Set(capability.BOUNDING, want...)
	if err := caps.Apply(capability.BOUNDS); err != nil {
		return fmt.Errorf("drop bounding capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_KEEPCAPS: %w", err)
	}
	if err := setIdentity(id); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_KEEPCAPS: %w", err)
	}
	caps.Clear(capability.CAPS | capability.AMBS)
	caps.Set(capability.PERMITTED|capability.EFFECTIVE, want...)
	if err := caps.Apply(capability.CAPS | capability.AMBS); err != nil {
		return fmt.Errorf("set capabilities: %w", err)
	}
	if s.NoNewPrivileges {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
		}
		if err := loadSeccomp(s.Seccomp); err != nil {
			return err
		}
	}
	return nil
}

// setIdentity sets the groups, gid and uid of the calling thread only
// (the libc wrappers and Go's syscall.Setuid change every thread).
func setIdentity(id identity) error {
	gids := make([]uint32, len(id.groups))
	for i, g := range id.groups {
		gids[i] = uint32(g)
	}
	var p *uint32
	if len(gids) > 0 {
		p = &gids[0]
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gids)), uintptr(unsafe.Pointer(p)), 0); e != 0 {
		return fmt.Errorf("setgroups %v: %w", id.groups, e)
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_SETRESGID, uintptr(id.gid), uintptr(id.gid), uintptr(id.gid)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", id.gid, e)
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_SETRESUID, uintptr(id.uid), uintptr(id.uid), uintptr(id.uid)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", id.uid, e)
	}
	return nil
}

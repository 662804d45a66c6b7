package container

import (
	"fmt"
	"slices"
	"strings"

	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Security is what the container's process may do: its identity, its
// capabilities, its seccomp filter, and which parts of /proc, /sys and /dev
// it sees. DefaultSecurity is containerd's and runc's default; a CRI caller
// (nodeagent/linux) derives each container's Security from it by applying
// the pod's securityContext fields one at a time. The init applies it in
// one place (applySecurity) just before exec.
type Security struct {
	// User is who the process runs as, "user[:group]" with names or
	// numbers, resolved in the container's /etc/passwd and /etc/group as
	// containerd does ("" = "0"). A numeric uid without an entry runs
	// with gid 0; a name without an entry is an error.
	User string `json:"user,omitempty"`
	// GID, when set, replaces the group User resolves to (runAsGroup).
	GID *uint32 `json:"gid,omitempty"`
	// AdditionalGids are added to the primary group and the user's groups
	// from /etc/group (supplementalGroups, fsGroup).
	AdditionalGids []uint32 `json:"additionalGids,omitempty"`
	// Capabilities ("CAP_CHOWN", …) form the bounding, permitted and
	// effective sets, as containerd sets them; the inheritable and ambient
	// sets are empty, so a non-root process keeps none across exec.
	Capabilities []string `json:"capabilities"`
	// NoNewPrivileges sets no_new_privs: setuid binaries and file
	// capabilities grant nothing.
	NoNewPrivileges bool `json:"noNewPrivileges,omitempty"`
	// Seccomp is the compiled filter (CompileSeccomp); empty: none.
	Seccomp []unix.SockFilter `json:"seccomp,omitempty"`
	// MaskedPaths are hidden: /dev/null over files, an empty read-only
	// tmpfs over directories.
	MaskedPaths []string `json:"maskedPaths,omitempty"`
	// ReadonlyPaths are bind-mounted read-only over themselves.
	ReadonlyPaths []string `json:"readonlyPaths,omitempty"`
	// ReadonlyRootfs remounts the root filesystem read-only.
	ReadonlyRootfs bool `json:"readonlyRootfs,omitempty"`
	// Devices are created in the container's fresh /dev (a tmpfs), and
	// with the devpts and console devices the only ones the device cgroup
	// lets it open.
	Devices []Device `json:"devices"`
	// Privileged gives the container every host device (and the device
	// cgroup no rule) and a writable /sys.
	Privileged bool `json:"privileged,omitempty"`
	// Rlimits are set before exec; resources not listed are inherited.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// ProcessLabel is the SELinux label the command is exec'd with, and
	// MountLabel the file label of its root filesystem's overlay (""
	// where SELinux is off: nothing is labeled).
	ProcessLabel string `json:"processLabel,omitempty"`
	MountLabel   string `json:"mountLabel,omitempty"`
}

// Device is a device node made in the container's /dev.
type Device struct {
	Path  string `json:"path"` // under /dev
	Type  byte   `json:"type"` // 'c' or 'b'
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
	Mode  uint32 `json:"mode"` // permission bits
}

// Rlimit is one resource limit.
type Rlimit struct {
	Resource int    `json:"resource"` // unix.RLIMIT_*
	Soft     uint64 `json:"soft"`
	Hard     uint64 `json:"hard"`
}

// DefaultCapabilities is containerd's default set (oci.defaultUnixCaps),
// the capabilities a container gets when its securityContext names none.
var DefaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// DefaultMaskedPaths are containerd's and kubelet's masked paths
// (securitycontext defaultMaskedPaths).
var DefaultMaskedPaths = []string{
	"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
	"/proc/sched_debug", "/proc/scsi", "/sys/firmware",
	"/sys/devices/virtual/powercap",
}

// DefaultReadonlyPaths are containerd's and kubelet's read-only paths.
var DefaultReadonlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// DefaultDevices are runc's default devices (specconv.AllowedDevices that
// are created): /dev/null, zero, full, random, urandom and tty. /dev/ptmx
// and /dev/pts/* come from the container's own devpts.
var DefaultDevices = []Device{
	{Path: "null", Type: 'c', Major: 1, Minor: 3, Mode: 0o666},
	{Path: "zero", Type: 'c', Major: 1, Minor: 5, Mode: 0o666},
	{Path: "full", Type: 'c', Major: 1, Minor: 7, Mode: 0o666},
	{Path: "random", Type: 'c', Major: 1, Minor: 8, Mode: 0o666},
	{Path: "urandom", Type: 'c', Major: 1, Minor: 9, Mode: 0o666},
	{Path: "tty", Type: 'c', Major: 5, Minor: 0, Mode: 0o666},
}

// DefaultRlimits is containerd's default (RLIMIT_NOFILE 1024:1024 in
// oci.populateDefaultUnixSpec); the other limits are the agent's.
var DefaultRlimits = []Rlimit{{Resource: unix.RLIMIT_NOFILE, Soft: 1024, Hard: 1024}}

// DefaultSecurity is a container's privileges when nothing asks for more
// or less: root (or the image's user), containerd's 14 capabilities, no
// seccomp filter (kubelet's default is Unconfined), runc's masked and
// read-only paths and devices. Every call returns fresh slices.
func DefaultSecurity() Security {
	return Security{
		Capabilities:  slices.Clone(DefaultCapabilities),
		MaskedPaths:   slices.Clone(DefaultMaskedPaths),
		ReadonlyPaths: slices.Clone(DefaultReadonlyPaths),
		Devices:       slices.Clone(DefaultDevices),
		Rlimits:       slices.Clone(DefaultRlimits),
	}
}

// allowedDevices are the device cgroup's rules besides Security.Devices,
// as runc's specconv.AllowedDevices: mknod of anything (opening is what is
// refused), the console, /dev/ptmx and the devpts terminals. A nil major
// or minor is "*".
var allowedDevices = []specs.LinuxDeviceCgroup{
	{Allow: true, Type: "c", Access: "m"},
	{Allow: true, Type: "b", Access: "m"},
	{Allow: true, Type: "c", Major: devNum(5), Minor: devNum(1), Access: "rwm"}, // /dev/console
	{Allow: true, Type: "c", Major: devNum(5), Minor: devNum(2), Access: "rwm"}, // /dev/ptmx
	{Allow: true, Type: "c", Major: devNum(136), Minor: nil, Access: "rwm"},     // /dev/pts/*
}

func devNum(n int64) *int64 { return &n }

// deviceRules is what the device cgroup allows after every device is
// denied: allowedDevices and s.Devices; nil for a privileged container
// (no rule: every device).
func (s Security) deviceRules() []specs.LinuxDeviceCgroup {
	if s.Privileged {
		return nil
	}
	rules := slices.Clone(allowedDevices)
	for _, d := range s.Devices {
		rules = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: string(d.Type),
			Major: devNum(int64(d.Major)), Minor: devNum(int64(d.Minor)), Access: "rwm"})
	}
	return rules
}

// v1DeviceRule is r as a cgroup v1 devices.allow line ("c 5:1 rwm").
func v1DeviceRule(r specs.LinuxDeviceCgroup) string {
	num := func(n *int64) string {
		if n == nil {
			return "*"
		}
		return fmt.Sprint(*n)
	}
	return fmt.Sprintf("%s %s:%s %s", r.Type, num(r.Major), num(r.Minor), r.Access)
}

// capByName maps "CAP_CHOWN" to its capability.
var capByName = func() map[string]capability.Cap {
	m := map[string]capability.Cap{}
	for _, c := range capability.ListKnown() {
		m["CAP_"+strings.ToUpper(c.String())] = c
	}
	return m
}()

// AllCapabilities returns, by name, every capability this kernel supports
// and this process's bounding set holds (what a privileged container gets:
// a process cannot grant more than it holds).
func AllCapabilities() []string {
	caps, err := capability.ListSupported()
	if err != nil {
		caps = capability.ListKnown()
	}
	var out []string
	for _, c := range caps {
		if ok, err := capability.GetBound(c); err == nil && !ok {
			continue
		}
		out = append(out, "CAP_"+strings.ToUpper(c.String()))
	}
	return out
}

// ParseCapability returns the canonical name ("CAP_NET_ADMIN") of a
// Kubernetes capability ("NET_ADMIN", "CAP_NET_ADMIN", any case), or an
// error for an unknown one.
func ParseCapability(name string) (string, error) {
	n := strings.ToUpper(name)
	if !strings.HasPrefix(n, "CAP_") {
		n = "CAP_" + n
	}
	if _, ok := capByName[n]; !ok {
		return "", fmt.Errorf("%w: unknown capability %q", ErrInvalidSpec, name)
	}
	return n, nil
}

// validate checks the capability names and devices.
func (s Security) validate() error {
	for _, c := range s.Capabilities {
		if _, ok := capByName[c]; !ok {
			return fmt.Errorf("%w: unknown capability %q", ErrInvalidSpec, c)
		}
	}
	for _, d := range s.Devices {
		if (d.Type != 'c' && d.Type != 'b') || d.Path == "" || strings.Contains(d.Path, "..") {
			return fmt.Errorf("%w: bad device %+v", ErrInvalidSpec, d)
		}
	}
	for _, p := range append(slices.Clone(s.MaskedPaths), s.ReadonlyPaths...) {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("%w: path %q is not absolute", ErrInvalidSpec, p)
		}
	}
	return nil
}

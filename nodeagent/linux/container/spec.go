package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Package sentinels. Match them with errors.Is.
var (
	// ErrInvalidSpec wraps every Spec.Validate failure.
	ErrInvalidSpec = errors.New("container: invalid spec")
	// ErrExec is returned by Start when the command could not be exec'd
	// (not found, not executable, bad working directory, mount failure).
	ErrExec = errors.New("container: exec failed")
	// ErrNotRunning is returned when signalling a container that has exited.
	ErrNotRunning = errors.New("container: not running")
	// ErrClosed is returned by Wait and Stop on a closed handle.
	ErrClosed = errors.New("container: handle closed")
	// ErrNoState is returned by Open for a directory without a state file.
	ErrNoState = errors.New("container: no state")
)

// Config configures how containers are started.
type Config struct {
	// Binary is the executable re-exec'd as shim and init; it must call
	// RunHelper first thing in main. Default: this process's executable.
	Binary string
	// StartTimeout bounds Start when ctx has no deadline.
	StartTimeout time.Duration
}

// DefaultConfig re-execs the running binary and waits 30 s for a start.
func DefaultConfig() Config {
	exe, _ := os.Executable()
	return Config{Binary: exe, StartTimeout: 30 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Binary == "" || !filepath.IsAbs(c.Binary) {
		return fmt.Errorf("container: Binary %q must be an absolute path", c.Binary)
	}
	if c.StartTimeout <= 0 {
		return fmt.Errorf("container: StartTimeout (%s) must be positive", c.StartTimeout)
	}
	return nil
}

// Mount is a bind mount into the container.
type Mount struct {
	Source      string `json:"source"`      // host path (file or directory)
	Destination string `json:"destination"` // absolute path in the container
	ReadOnly    bool   `json:"readOnly,omitempty"`
	// SubPath, when set, is mounted instead of Source: a relative path
	// resolved under Source as if Source were "/" (a symlink in the
	// volume never leads out of it), by the init in one openat2 call, and
	// mounted through the resulting descriptor (no check-then-use race).
	SubPath string `json:"subPath,omitempty"`
	// Volume: Source is one of the pod's volumes that the node made
	// (relabeled for SELinux), not a host path.
	Volume bool `json:"volume,omitempty"`
}

// Spec is what to run. It is written to <Dir>/spec.json and read by the
// shim and the init.
type Spec struct {
	ID     string `json:"id"`
	Dir    string `json:"dir"`    // state directory (spec, state, shim log); must exist or be creatable
	Rootfs string `json:"rootfs"` // root filesystem (or, with Image, its mount point), pivot_root'ed into
	// Image, when set, is a read-only unpacked image shared by containers:
	// the init mounts an overlay of it at Rootfs (in the container's own
	// mount namespace, so the mount vanishes with the container), with the
	// writable layer in Dir/upper.
	Image      string   `json:"image,omitempty"`
	LogPath    string   `json:"logPath"` // CRI-format log of stdout and stderr (appended)
	Hostname   string   `json:"hostname,omitempty"`
	Args       []string `json:"args"` // argv; Args[0] is looked up in the container's PATH unless it has a slash
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"` // default "/"
	Mounts     []Mount  `json:"mounts,omitempty"`
	// LogMaxSize, when set, rotates the log before it would pass this many
	// bytes, keeping LogMaxFiles files (the current one included), as
	// kubelet's containerLogMaxSize and containerLogMaxFiles.
	LogMaxSize  int64 `json:"logMaxSize,omitempty"`
	LogMaxFiles int   `json:"logMaxFiles,omitempty"`
	// NetnsPath is the network namespace to join ("" = the shim's: the
	// host's, hostNetwork).
	NetnsPath string `json:"netnsPath,omitempty"`
	// HostPID, HostIPC and HostUTS keep the host's PID, IPC and UTS
	// namespaces (hostPID, hostIPC; hostNetwork pods keep the host's UTS
	// namespace as containerd does) instead of new ones. With HostUTS the
	// hostname is not set.
	HostPID bool `json:"hostPID,omitempty"`
	// PIDNamespace, when set, is the pod's shared PID namespace
	// (shareProcessNamespace, StartPIDNamespace): the init joins it instead
	// of getting a new one, and is not its PID 1.
	PIDNamespace *PIDNamespace `json:"pidNamespace,omitempty"`
	HostIPC      bool          `json:"hostIPC,omitempty"`
	HostUTS      bool          `json:"hostUTS,omitempty"`
	// Sysctls (dotted names) are set in the container's namespaces before
	// its command runs; only namespaced ones, and never in a namespace of
	// the host's (Validate refuses them).
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Cgroups places the container: "" → a cgroup v2 directory, or cgroup
	// v1 subsystem → directory. Empty: the shim's cgroup.
	Cgroups map[string]string `json:"cgroups,omitempty"`
	// Security is what the process may do; nil: DefaultSecurity (never
	// more than containerd's defaults by accident).
	Security *Security `json:"security,omitempty"`
	// Stdin keeps the command's stdin open, held by the shim, for
	// attaches (Container.Attach) to write to; StdinOnce closes it when
	// the first attach's stdin ends. TTY runs the command on a
	// pseudo-terminal held by the shim (its controlling terminal; stdout
	// and stderr are both the terminal's output, logged as stdout).
	Stdin     bool `json:"stdin,omitempty"`
	StdinOnce bool `json:"stdinOnce,omitempty"`
	TTY       bool `json:"tty,omitempty"`
}

// security returns the spec's Security or the default.
func (s Spec) security() Security {
	if s.Security == nil {
		return DefaultSecurity()
	}
	return *s.Security
}

// Validate checks the spec.
func (s Spec) Validate() error {
	switch {
	case s.ID == "" || strings.ContainsAny(s.ID, "/\x00"):
		return fmt.Errorf("%w: bad ID %q", ErrInvalidSpec, s.ID)
	case !filepath.IsAbs(s.Dir):
		return fmt.Errorf("%w: Dir %q is not absolute", ErrInvalidSpec, s.Dir)
	case !filepath.IsAbs(s.Rootfs):
		return fmt.Errorf("%w: Rootfs %q is not absolute", ErrInvalidSpec, s.Rootfs)
	case s.Image != "" && !filepath.IsAbs(s.Image):
		return fmt.Errorf("%w: Image %q is not absolute", ErrInvalidSpec, s.Image)
	case !filepath.IsAbs(s.LogPath):
		return fmt.Errorf("%w: LogPath %q is not absolute", ErrInvalidSpec, s.LogPath)
	case s.LogMaxSize != 0 && s.LogMaxSize < MinLogMaxSize:
		return fmt.Errorf("%w: LogMaxSize (%d) must be 0 or at least %d", ErrInvalidSpec, s.LogMaxSize, MinLogMaxSize)
	case s.LogMaxSize != 0 && s.LogMaxFiles < 2:
		return fmt.Errorf("%w: LogMaxFiles (%d) must be at least 2 with LogMaxSize set", ErrInvalidSpec, s.LogMaxFiles)
	case len(s.Args) == 0 || s.Args[0] == "":
		return fmt.Errorf("%w: no command", ErrInvalidSpec)
	case s.WorkingDir != "" && !filepath.IsAbs(s.WorkingDir):
		return fmt.Errorf("%w: workingDir %q is not absolute", ErrInvalidSpec, s.WorkingDir)
	case s.PIDNamespace != nil && (s.HostPID || s.PIDNamespace.PID <= 0):
		return fmt.Errorf("%w: a shared PID namespace needs a holder and not the host's", ErrInvalidSpec)
	}
	for _, m := range s.Mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Destination) {
			return fmt.Errorf("%w: mount %q -> %q: paths must be absolute", ErrInvalidSpec, m.Source, m.Destination)
		}
		if filepath.IsAbs(m.SubPath) {
			return fmt.Errorf("%w: mount %q: subPath %q must be relative", ErrInvalidSpec, m.Source, m.SubPath)
		}
	}
	if err := s.validateSysctls(); err != nil {
		return err
	}
	if err := s.security().validate(); err != nil {
		return err
	}
	if _, ok := s.Cgroups[""]; ok && len(s.Cgroups) > 1 {
		return fmt.Errorf("%w: cgroups mix v2 and v1 paths", ErrInvalidSpec)
	}
	return nil
}

// Status is a container's life stage.
type Status string

// Statuses.
const (
	StatusCreated Status = "created" // the shim runs; the command is not exec'd yet
	StatusRunning Status = "running"
	StatusExited  Status = "exited"
)

// State is the shim's record of the container, kept in <Dir>/state.json
// (replaced atomically).
type State struct {
	ID     string `json:"id"`
	Status Status `json:"status"`
	// ShimPID and ShimStart (start time in clock ticks since boot, field 22
	// of /proc/<pid>/stat) identify the shim; PID and PIDStart the
	// container's init, as seen from the host. A pid is trusted only while
	// its start time matches, so a reused pid is never signalled.
	ShimPID    int       `json:"shimPid"`
	ShimStart  uint64    `json:"shimStart"`
	PID        int       `json:"pid,omitempty"`
	PIDStart   uint64    `json:"pidStart,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	ExitCode   int       `json:"exitCode"`
	Signal     int       `json:"signal,omitempty"`
	OOMKilled  bool      `json:"oomKilled,omitempty"`
	// Error says why the command could not be exec'd (Status exited).
	Error string `json:"error,omitempty"`
}

const (
	specFile  = "spec.json"
	stateFile = "state.json"
	shimLog   = "shim.log"
)

// ReadSpec reads the spec of the container in dir.
func ReadSpec(dir string) (Spec, error) {
	var s Spec
	b, err := os.ReadFile(filepath.Join(dir, specFile))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// ReadState reads the state file of the container in dir.
func ReadState(dir string) (State, error) {
	var st State
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, fmt.Errorf("container %q: %w", dir, ErrNoState)
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("container %q: state: %w", dir, err)
	}
	return st, nil
}

// WriteJSON writes v as JSON to path atomically (a temporary file renamed
// into place), mode 0600: the state files a restarted agent reads back.
func WriteJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

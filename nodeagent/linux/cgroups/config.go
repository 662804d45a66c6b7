package cgroups

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Package sentinels. Match them with errors.Is.
var (
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("cgroups: invalid config")
	// ErrUnavailable means the cgroup hierarchy asked for cannot be used
	// here (not mounted, controllers missing, not root).
	ErrUnavailable = errors.New("cgroups: unavailable")
	// ErrBusy is returned when a cgroup to remove still holds processes;
	// the caller kills them first.
	ErrBusy = errors.New("cgroups: cgroup still has processes")
	// ErrNotSupported is returned by operations the hierarchy in use cannot
	// do (CgroupFD on v1).
	ErrNotSupported = errors.New("cgroups: not supported by this hierarchy")
	// ErrInvalidArgument is returned for a pod UID, QoS class or container
	// name that cannot name a cgroup.
	ErrInvalidArgument = errors.New("cgroups: invalid argument")
)

// Hierarchy modes.
const (
	ModeAuto = "auto" // v2 on a unified host, v1 on a legacy or hybrid one
	ModeV1   = "v1"
	ModeV2   = "v2"
)

// Config configures a Manager.
type Config struct {
	// Root names podflow's hierarchy below each cgroup mount: the pod of UID
	// u in QoS class Burstable lives at /<Root>/burstable/pod<u>. It must
	// contain "podflow" so that what podflow creates is recognisable.
	Root string
	// Mode is ModeAuto, ModeV1 or ModeV2.
	Mode string
	// Mountpoint is where the cgroup filesystems are mounted
	// (/sys/fs/cgroup). In v2 on a hybrid host the unified hierarchy is
	// Mountpoint/unified.
	Mountpoint string
}

// DefaultConfig returns Root "podflow", ModeAuto, Mountpoint /sys/fs/cgroup.
func DefaultConfig() Config {
	return Config{Root: "podflow", Mode: ModeAuto, Mountpoint: "/sys/fs/cgroup"}
}

// Validate checks c.
func (c Config) Validate() error {
	switch {
	case c.Root == "" || c.Root != filepath.Clean(c.Root) || strings.HasPrefix(c.Root, "/") || strings.HasPrefix(c.Root, ".."):
		return fmt.Errorf("%w: Root %q must be a clean relative path", ErrInvalidConfig, c.Root)
	case !strings.Contains(strings.ToLower(c.Root), "podflow"):
		return fmt.Errorf("%w: Root %q must contain \"podflow\"", ErrInvalidConfig, c.Root)
	case c.Mode != ModeAuto && c.Mode != ModeV1 && c.Mode != ModeV2:
		return fmt.Errorf("%w: Mode %q is not auto, v1 or v2", ErrInvalidConfig, c.Mode)
	case !filepath.IsAbs(c.Mountpoint):
		return fmt.Errorf("%w: Mountpoint %q is not absolute", ErrInvalidConfig, c.Mountpoint)
	}
	return nil
}

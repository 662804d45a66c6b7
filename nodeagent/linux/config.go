package linux

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/cgroups"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/image"
	"github.com/podflow/podflow/nodeagent/linux/network"
)

// Package sentinels. Match them with errors.Is.
var (
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("linux: invalid config")
	// ErrUnavailable is returned by New when the machine cannot run pods
	// (no root, no cgroups, no network namespaces); its message points at
	// the simulated runtime.
	ErrUnavailable = errors.New("linux: runtime unavailable")
	// ErrHostPathNotAllowed is wrapped by MountVolumes for a hostPath
	// volume outside Config.HostPathPrefixes.
	ErrHostPathNotAllowed = errors.New("linux: hostPath not allowed")
	// ErrNodeInUse is returned by New when a live agent on this machine
	// runs the same node name (or uses the same DataDir): its pods, bridge
	// and cgroups are left alone.
	ErrNodeInUse = errors.New("linux: node in use by a live agent")
	// ErrForeignLeftovers is returned by New when the node's kernel objects
	// belong to a stopped agent with another DataDir that still records
	// pods: that agent adopts them when it starts again.
	ErrForeignLeftovers = errors.New("linux: node has another agent's pods")
)

// Config configures a Runtime (one per node agent).
type Config struct {
	// NodeName is the node's name. Required.
	NodeName string
	// DataDir is the node's directory: pods/ (sandboxes, volumes,
	// containers, logs), images/ (the image store), network/ (IPAM). It
	// must survive agent restarts. Required, absolute.
	DataDir string
	// LockDir holds one lock file per node name on the machine,
	// <node>.lock, held by the live agent of that node and recording its
	// identity (see nodelock.go). Default /run/podflow: like the kernel
	// objects it guards, it does not outlive a reboot. Absolute.
	LockDir string
	// Network configures the pod network (bridge, pod CIDR, IPAM under
	// DataDir/network).
	Network network.Config
	// Cgroups configures the QoS cgroup hierarchy.
	Cgroups cgroups.Config
	// Image configures the image store (Dir under DataDir/images).
	Image image.Config
	// Container says how container shims are started (the binary re-exec'd
	// as shim and init calls container.RunHelper first thing).
	Container container.Config
	// SpareShims is how many container shims are kept started ahead of
	// need (0: each container start starts its shim).
	SpareShims int
	// NodeIP is the node's address, the pod IP of hostNetwork pods
	// (kubelet's status.hostIP). Default 127.0.0.1.
	NodeIP string
	// ClusterDNS are the nameservers of ClusterFirst pods (kubelet's
	// --cluster-dns): the node agent's cluster DNS on the bridge's gateway.
	// Empty: ClusterFirst pods get Default (kubelet's fallback).
	ClusterDNS []string
	// ClusterDomain is the cluster's DNS domain (kubelet's
	// --cluster-domain, default "cluster.local").
	ClusterDomain string
	// ResolvConf is the node's resolv.conf, the one of dnsPolicy Default
	// pods (kubelet's --resolv-conf, default /etc/resolv.conf).
	ResolvConf string
	// HostPathPrefixes are the only host directories (or files) hostPath
	// volumes may name (or lie below). Empty: hostPath volumes are
	// refused. An entry ending in HostPathReadOnlySuffix ("/etc/hosts:ro")
	// allows read-only mounts only: a volumeMount of it is read-only
	// whatever it asks, and DirectoryOrCreate creates nothing under it.
	HostPathPrefixes []string
	// SeccompDefault makes RuntimeDefault the seccomp profile of
	// containers that name none, as kubelet's --seccomp-default (false,
	// kubelet's default: Unconfined).
	SeccompDefault bool
	// SeccompProfileRoot is where Localhost seccomp profiles are looked up
	// (kubelet's --seccomp-profile-root). Default DataDir/seccomp.
	SeccompProfileRoot string
	// AllowedUnsafeSysctls are the sysctls, beyond Kubernetes' safe set,
	// that pods may set: names or glob patterns ending in "*"
	// ("net.core.*"), as kubelet's --allowed-unsafe-sysctls. Only
	// namespaced sysctls can be allowed (kernel.shm*, kernel.msg*,
	// kernel.sem, fs.mqueue.*, net.*).
	AllowedUnsafeSysctls []string
	// ContainerLogMaxSize and ContainerLogMaxFiles rotate each container's
	// log (kubelet's containerLogMaxSize and containerLogMaxFiles): before a
	// file passes MaxSize bytes it is renamed aside, keeping MaxFiles files
	// in all. Defaults 10 MiB and 5; MaxSize 0 never rotates.
	ContainerLogMaxSize  int64
	ContainerLogMaxFiles int
	// Capacity overrides what Capacity measures (quantity strings).
	Capacity map[string]string
	// MaxPods is the "pods" capacity (Kubernetes default 110).
	MaxPods int
	// StopTimeout bounds StopPodSandbox's wait for killed containers.
	StopTimeout time.Duration
	// Trace, when set, receives the duration of each step of pod start:
	// "cgroup", "network" (and its phases "network-ip", "network-netns",
	// "network-veth", "network-configure"), "rootfs", "cgroup-container",
	// "start".
	Trace func(podUID, step string, d time.Duration) `json:"-"`
	// Logger receives the runtime's logs; nil discards them.
	Logger *slog.Logger `json:"-"`
}

// DefaultLockDir is Config.LockDir's default.
const DefaultLockDir = "/run/podflow"

// HostPathReadOnlySuffix ends an entry of Config.HostPathPrefixes that
// allows read-only mounts only.
const HostPathReadOnlySuffix = ":ro"

// DefaultConfig returns the configuration of node with podCIDR, keeping
// everything under dataDir; images come from mirror ("" = docker.io).
func DefaultConfig(node, podCIDR, dataDir, mirror string) Config {
	ic := image.DefaultConfig(filepath.Join(dataDir, "images"))
	ic.Mirror = mirror
	// Each node has its own cgroup root, so that several node agents on one
	// machine never take each other's pods for orphans.
	cg := cgroups.DefaultConfig()
	cg.Root = "podflow-" + node
	return Config{
		NodeName:           node,
		DataDir:            dataDir,
		LockDir:            DefaultLockDir,
		Network:            network.DefaultConfig(node, podCIDR, filepath.Join(dataDir, "network")),
		Cgroups:            cg,
		Image:              ic,
		Container:          container.DefaultConfig(),
		SeccompProfileRoot: filepath.Join(dataDir, "seccomp"),
		NodeIP:             "127.0.0.1",
		ClusterDomain:      "cluster.local",
		ResolvConf:         "/etc/resolv.conf",
		MaxPods:            110,
		SpareShims:         2,
		StopTimeout:        10 * time.Second,

		ContainerLogMaxSize:  container.DefaultLogMaxSize,
		ContainerLogMaxFiles: container.DefaultLogMaxFiles,
	}
}

// Validate checks c and its parts.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return fmt.Errorf("%w: NodeName is empty", ErrInvalidConfig)
	case !filepath.IsAbs(c.DataDir):
		return fmt.Errorf("%w: DataDir %q is not absolute", ErrInvalidConfig, c.DataDir)
	case !filepath.IsAbs(c.LockDir):
		return fmt.Errorf("%w: LockDir %q is not absolute", ErrInvalidConfig, c.LockDir)
	case c.MaxPods <= 0:
		return fmt.Errorf("%w: MaxPods (%d) must be positive", ErrInvalidConfig, c.MaxPods)
	case c.ContainerLogMaxSize != 0 && c.ContainerLogMaxSize < container.MinLogMaxSize:
		return fmt.Errorf("%w: ContainerLogMaxSize (%d) must be 0 or at least %d", ErrInvalidConfig, c.ContainerLogMaxSize, container.MinLogMaxSize)
	case c.ContainerLogMaxSize != 0 && c.ContainerLogMaxFiles < 2:
		return fmt.Errorf("%w: ContainerLogMaxFiles (%d) must be at least 2", ErrInvalidConfig, c.ContainerLogMaxFiles)
	case c.SpareShims < 0:
		return fmt.Errorf("%w: SpareShims (%d) is negative", ErrInvalidConfig, c.SpareShims)
	case !filepath.IsAbs(c.SeccompProfileRoot):
		return fmt.Errorf("%w: SeccompProfileRoot %q is not absolute", ErrInvalidConfig, c.SeccompProfileRoot)
	case net.ParseIP(c.NodeIP) == nil:
		return fmt.Errorf("%w: NodeIP %q is not an IP address", ErrInvalidConfig, c.NodeIP)
	case c.StopTimeout <= 0:
		return fmt.Errorf("%w: StopTimeout (%s) must be positive", ErrInvalidConfig, c.StopTimeout)
	}
	for _, p := range c.HostPathPrefixes {
		if path, _ := SplitHostPathPrefix(p); !filepath.IsAbs(path) || path == "/" {
			return fmt.Errorf("%w: HostPathPrefixes: %q must be an absolute path other than / (optionally with %s)", ErrInvalidConfig, p, HostPathReadOnlySuffix)
		}
	}
	for _, ip := range c.ClusterDNS {
		if net.ParseIP(ip) == nil {
			return fmt.Errorf("%w: ClusterDNS: %q is not an IP address", ErrInvalidConfig, ip)
		}
	}
	if err := nodeagent.ValidateSysctlPatterns(c.AllowedUnsafeSysctls); err != nil {
		return fmt.Errorf("%w: AllowedUnsafeSysctls: %w", ErrInvalidConfig, err)
	}
	for name, err := range map[string]error{
		"Network": c.Network.Validate(), "Cgroups": c.Cgroups.Validate(),
		"Image": c.Image.Validate(), "Container": c.Container.Validate(),
	} {
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidConfig, name, err)
		}
	}
	return nil
}

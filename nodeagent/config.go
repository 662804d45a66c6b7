package nodeagent

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Backoff is an exponential backoff: Initial, doubling up to Max. When
// ResetAfter is non-zero, a container that ran at least that long before
// failing starts again from Initial.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	ResetAfter time.Duration
}

// Next returns the delay following prev (0 = first failure).
func (b Backoff) Next(prev time.Duration) time.Duration {
	if prev <= 0 {
		return b.Initial
	}
	if prev >= b.Max/2 {
		return b.Max
	}
	return prev * 2
}

func (b Backoff) validate(name string) error {
	if b.Initial <= 0 || b.Max < b.Initial {
		return fmt.Errorf("%w: %s: need 0 < Initial (%s) <= Max (%s)", ErrInvalidConfig, name, b.Initial, b.Max)
	}
	if b.ResetAfter < 0 {
		return fmt.Errorf("%w: %s: ResetAfter (%s) is negative", ErrInvalidConfig, name, b.ResetAfter)
	}
	return nil
}

// Config configures an Agent.
type Config struct {
	// NodeName is the Node's name and the agent's replica name. Required.
	NodeName string
	// PodCIDR is the node's pod CIDR (spec.podCIDR), e.g. "10.244.1.0/24".
	// Required.
	PodCIDR string
	// HostIP is the node's InternalIP, reported as status.hostIP of its pods.
	HostIP string
	// Capacity overrides the runtime's Capacity() when non-nil (quantity
	// strings).
	Capacity map[string]string
	// Reserved is kept back from capacity for the system and the agent
	// itself (kubelet's --system-reserved + --kube-reserved): allocatable is
	// capacity minus Reserved, never below zero.
	Reserved map[string]string
	// Labels are added to the well-known node labels
	// (kubernetes.io/hostname, kubernetes.io/os, kubernetes.io/arch).
	Labels map[string]string
	// Taints are the node's spec.taints.
	Taints []*corev1.Taint

	// LeaseDuration is the node Lease's leaseDurationSeconds (kubelet's
	// --node-lease-duration-seconds): the Lease is renewed at every
	// heartbeat. Default 40s.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often Run heartbeats: it renews the node's
	// Lease (kubelet's node lease renew interval, 10s) and computes the
	// node's status (kubelet's nodeStatusUpdateFrequency, 10s), which it
	// writes only when it changed or NodeStatusReportFrequency has passed.
	HeartbeatInterval time.Duration
	// NodeStatusReportFrequency is how often the node's status is written
	// (and a NodeHeartbeat published) when nothing in it changed but the
	// conditions' lastHeartbeatTime (kubelet's nodeStatusReportFrequency,
	// flag --node-status-report-frequency): in between, the renewed Lease
	// alone says the node is alive. Default 5m; one no longer than
	// HeartbeatInterval writes the status at every heartbeat.
	NodeStatusReportFrequency time.Duration
	// ResyncPeriod is how often Run reconciles workers against the pods the
	// store binds to this node.
	ResyncPeriod time.Duration
	// SyncPeriod is how often a worker re-syncs a running pod's
	// configMap, secret and downwardAPI volumes with the store (kubelet's
	// --sync-frequency, 1m): the longest a change to a referenced
	// ConfigMap or Secret takes to reach the pod's files.
	SyncPeriod time.Duration
	// EvictionPeriod is how often a worker checks its pod's emptyDir
	// volumes against their sizeLimit (kubelet's eviction manager
	// monitoring interval, 10s).
	EvictionPeriod time.Duration
	// PublishTimeout bounds one Publish when the caller's context has no
	// deadline; PublishRetry is the delay before a failed report is retried.
	PublishTimeout time.Duration
	PublishRetry   time.Duration

	// CrashLoopBackOff delays restarts of failed containers (Kubernetes:
	// 10s doubling to 5m, reset after 10m of running).
	CrashLoopBackOff Backoff
	// ImagePullBackOff delays image pull retries (Kubernetes: 10s to 5m).
	ImagePullBackOff Backoff
	// SetupBackOff delays retries of sandbox creation and volume mounts.
	SetupBackOff Backoff
	// DefaultGracePeriod applies when a pod sets no
	// terminationGracePeriodSeconds.
	DefaultGracePeriod time.Duration
	// SpecSecond is the real duration of one second written in a pod spec
	// (probe delays, periods, timeouts, grace periods). It is time.Second;
	// tests and simulations may shrink it to run faster.
	SpecSecond time.Duration

	// Services, when set, gives containers their Service environment
	// variables (servicelinks.go); a ServiceCache fed by the node's
	// Service watch.
	Services ServiceLister

	// Pool runs the agent's pod workers; nil gives the agent its own of
	// DefaultPoolSize. Agents in one process may share one (sim.Cluster
	// does): it bounds the pods being worked on at once across them all.
	Pool *Pool

	// Clock is the time source; nil means the wall clock.
	Clock Clock
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the Kubernetes kubelet's timings for node.
func DefaultConfig(node, podCIDR string) Config {
	return Config{
		NodeName:           node,
		PodCIDR:            podCIDR,
		HostIP:             "127.0.0.1",
		HeartbeatInterval:  10 * time.Second,
		LeaseDuration:      40 * time.Second,
		ResyncPeriod:       time.Minute,
		SyncPeriod:         time.Minute,
		EvictionPeriod:     10 * time.Second,
		PublishTimeout:     10 * time.Second,
		PublishRetry:       time.Second,
		CrashLoopBackOff:   Backoff{Initial: 10 * time.Second, Max: 5 * time.Minute, ResetAfter: 10 * time.Minute},
		ImagePullBackOff:   Backoff{Initial: 10 * time.Second, Max: 5 * time.Minute},
		SetupBackOff:       Backoff{Initial: 500 * time.Millisecond, Max: 2 * time.Minute},
		DefaultGracePeriod: 30 * time.Second,
		SpecSecond:         time.Second,

		NodeStatusReportFrequency: 5 * time.Minute,
	}
}

// Validate checks every field and the rules between them.
func (c Config) Validate() error {
	if c.NodeName == "" {
		return fmt.Errorf("%w: NodeName is empty", ErrInvalidConfig)
	}
	p, err := netip.ParsePrefix(c.PodCIDR)
	if err != nil {
		return fmt.Errorf("%w: PodCIDR %q: %v", ErrInvalidConfig, c.PodCIDR, err)
	}
	if p.Masked() != p {
		return fmt.Errorf("%w: PodCIDR %q has host bits set", ErrInvalidConfig, c.PodCIDR)
	}
	if c.HostIP != "" {
		if _, err := netip.ParseAddr(c.HostIP); err != nil {
			return fmt.Errorf("%w: HostIP %q: %v", ErrInvalidConfig, c.HostIP, err)
		}
	}
	for name, d := range map[string]time.Duration{
		"HeartbeatInterval": c.HeartbeatInterval, "ResyncPeriod": c.ResyncPeriod,
		"SyncPeriod": c.SyncPeriod, "EvictionPeriod": c.EvictionPeriod,
		"PublishTimeout": c.PublishTimeout, "PublishRetry": c.PublishRetry,
		"SpecSecond": c.SpecSecond, "NodeStatusReportFrequency": c.NodeStatusReportFrequency,
	} {
		if d <= 0 {
			return fmt.Errorf("%w: %s (%s) must be positive", ErrInvalidConfig, name, d)
		}
	}
	if c.DefaultGracePeriod < 0 {
		return fmt.Errorf("%w: DefaultGracePeriod (%s) is negative", ErrInvalidConfig, c.DefaultGracePeriod)
	}
	if c.ResyncPeriod < c.HeartbeatInterval {
		return fmt.Errorf("%w: ResyncPeriod (%s) is shorter than HeartbeatInterval (%s)", ErrInvalidConfig, c.ResyncPeriod, c.HeartbeatInterval)
	}
	for name, b := range map[string]Backoff{
		"CrashLoopBackOff": c.CrashLoopBackOff, "ImagePullBackOff": c.ImagePullBackOff, "SetupBackOff": c.SetupBackOff,
	} {
		if err := b.validate(name); err != nil {
			return err
		}
	}
	return nil
}

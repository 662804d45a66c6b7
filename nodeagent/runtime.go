package nodeagent

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Runtime is the seam between the agent core (the "kubelet") and what runs
// pods: the simulated runtime in package sim, or a Linux runtime that
// programs cgroups, network namespaces and processes.
//
// Concurrency: methods may be called concurrently for different pods; the
// agent calls the methods of one pod from that pod's worker goroutine only
// (except ListSandboxes and ListContainers, called at start and on resync).
// Every blocking method honours ctx. Failures are *Error values whose Code
// says what went wrong (CodeImagePull, CodeSandbox, CodeMount, ...); the
// agent turns codes into Kubernetes reasons.
type Runtime interface {
	// RunPodSandbox creates the pod's sandbox (network namespace, pod IP from
	// the node's pod CIDR). It is idempotent: a second call for a pod whose
	// sandbox exists returns that sandbox.
	RunPodSandbox(ctx context.Context, pod *corev1.Pod) (Sandbox, error)
	// StopPodSandbox stops whatever still runs in the pod's sandbox. It is
	// idempotent and succeeds when there is no sandbox.
	StopPodSandbox(ctx context.Context, podUID string) error
	// RemovePodSandbox removes the sandbox and everything of the pod
	// (containers, volumes) and releases its IP. Idempotent.
	RemovePodSandbox(ctx context.Context, podUID string) error
	// MountVolumes makes the pod's volumes available to its containers;
	// vols carries the resolved content of configMap, secret and
	// downwardAPI volumes. While the pod runs the agent calls it again
	// with the volumes whose content changed: the runtime replaces their
	// files atomically (a container sees the old set or the new one).
	MountVolumes(ctx context.Context, pod *corev1.Pod, vols []VolumeData) error
	// PullImage makes image present according to policy (Always,
	// IfNotPresent, Never).
	PullImage(ctx context.Context, pod *corev1.Pod, image string, policy string) (ImageRef, error)
	// StartContainer creates and starts container c of pod in sb. c is the
	// container as the agent resolved it (kubelet's container config): Env
	// holds every variable with its final value (valueFrom and envFrom
	// resolved, $(VAR) expanded), Command and Args are expanded. The
	// runtime merges Env over the image's environment and must not expand
	// anything again.
	StartContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sb Sandbox) (ContainerID, error)
	// StopContainer sends SIGTERM, waits up to grace, then kills. It returns
	// once the container has stopped, with its exit; that exit is not also
	// delivered on ContainerExits.
	StopContainer(ctx context.Context, id ContainerID, grace time.Duration) (ContainerExit, error)
	// ContainerExits returns the channel on which exits of the pod's
	// containers that the agent did not ask for (crashes, completions) are
	// delivered, each exactly once. It is nil when the pod has no sandbox.
	// The runtime never closes it; the agent must keep receiving while the
	// sandbox exists.
	ContainerExits(podUID string) <-chan ContainerExit
	// NotifyExits has the runtime call notify each time it has put an
	// exit on the pod's ContainerExits channel, until the sandbox is
	// removed; a later call replaces notify. notify never blocks and may
	// run on any goroutine: the agent's pod workers have no goroutine of
	// their own to wait on the channel.
	NotifyExits(podUID string, notify func())
	// Probe runs one probe of container c. A probe that ran and failed is
	// (ProbeResult{OK: false, ...}, nil); an error means it could not run.
	Probe(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id ContainerID, kind ProbeKind, p *corev1.Probe) (ProbeResult, error)
	// ListSandboxes and ListContainers report what exists, for recovery after
	// an agent restart.
	ListSandboxes(ctx context.Context) ([]SandboxInfo, error)
	ListContainers(ctx context.Context, podUID string) ([]ContainerInfo, error)
	// Capacity is the node's capacity as Kubernetes quantity strings
	// ("cpu": "8", "memory": "32Gi", "pods": "110"). The map may be the
	// runtime's own: the caller reads it and does not keep it.
	Capacity() map[string]string
}

// Sandbox is a pod's sandbox.
type Sandbox struct {
	ID string
	IP string
}

// ContainerID names one container instance (a restart is a new instance).
type ContainerID string

// ImageRef is a pulled image.
type ImageRef struct {
	ID             string // image digest, reported as containerStatus.imageID
	SizeBytes      int64
	AlreadyPresent bool
}

// VolumeData is one of the pod's volumes with what the store holds for it.
// Files maps a path inside the volume to its content (configMap, secret,
// downwardAPI, projected); a runtime may keep the map but must not write
// to the contents, which the agent shares between pods and with its own
// state (a projected token, a ConfigMap's files). Modes, set for projected volumes, gives each
// file's permission bits (the item's mode or the volume's defaultMode, as
// kubelet's projected plugin resolves them); for the other kinds the
// runtime derives them from the volume. MemorySize, for an emptyDir of
// medium Memory, is its tmpfs size in bytes, sized as kubelet sizes it
// (the volume's sizeLimit, else the pod's memory limit, else the node's
// allocatable memory); for a secret, downwardAPI or projected volume it
// is the size of the tmpfs under it, kubelet's wrapping memory emptyDir
// (the pod's memory limit, else the node's allocatable memory); 0: the
// kernel's default.
type VolumeData struct {
	Volume     *corev1.Volume
	Files      map[string][]byte
	Modes      map[string]uint32
	MemorySize int64
}

// ContainerExit says how a container ended.
type ContainerExit struct {
	ID         ContainerID
	ExitCode   int32
	Signal     int32
	Reason     string // "" (derived from the exit code) or OOMKilled
	Message    string
	FinishedAt time.Time
}

// ProbeKind names the probe being run.
type ProbeKind string

// Probe kinds.
const (
	ProbeStartup   ProbeKind = "Startup"
	ProbeLiveness  ProbeKind = "Liveness"
	ProbeReadiness ProbeKind = "Readiness"
)

// ProbeResult is the outcome of one probe run.
type ProbeResult struct {
	OK      bool
	Message string
}

// SandboxInfo describes an existing sandbox.
type SandboxInfo struct {
	PodUID       string
	Namespace    string
	Name         string
	Sandbox      Sandbox
	VolumesReady bool
	CreatedAt    time.Time
	// Released: the sandbox of a finished pod, released (SandboxReleaser):
	// it holds exited containers and their logs, nothing that runs.
	Released bool
}

// ContainerInfo describes an existing container instance.
type ContainerInfo struct {
	ID           ContainerID
	PodUID       string
	Name         string
	Image        string
	ImageID      string
	RestartCount int32
	Init         bool
	Running      bool
	StartedAt    time.Time
	Exit         *ContainerExit // set when not running
}

// RuntimeVersioner is implemented by runtimes that name themselves in
// Node.status.nodeInfo.containerRuntimeVersion, as "<runtime>://<version>"
// (containerd's "containerd://1.7.2"): the CONTAINER-RUNTIME of kubectl get
// nodes -o wide. Runtimes without it are reported as "podflow://<version>".
type RuntimeVersioner interface {
	RuntimeVersion() string
}

// Version is podflow's version as the running binary was built: its main
// module's version, or v0.0.0-dev for a development build. It is read
// once: debug.ReadBuildInfo parses the binary's whole module list, and
// every node status names the version.
var Version = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "v0.0.0-dev"
})

// SecretPuller is implemented by runtimes that pull with registry
// credentials. For a pod with spec.imagePullSecrets the agent calls it
// instead of PullImage with the Secrets of those it could read (kubelet's
// getPullSecretsForPod); the runtime uses the credentials
// (kubernetes.io/dockerconfigjson, kubernetes.io/dockercfg) that match
// the image's registry. Runtimes without it pull anonymously.
type SecretPuller interface {
	PullImageWithSecrets(ctx context.Context, pod *corev1.Pod, image, policy string, secrets []*corev1.Secret) (ImageRef, error)
}

// ImageLister is implemented by runtimes that keep images: the agent
// reports them in Node.status.images, which the scheduler's ImageLocality
// score uses.
type ImageLister interface {
	NodeImages() []*corev1.ContainerImage
}

// TerminationMessageReader is implemented by runtimes that keep what an
// exited container left for its termination message, as kubelet reads it
// (kuberuntime's getTerminationMessage and
// readLastStringFromContainerLogs): the file the container wrote at its
// terminationMessagePath (default /dev/termination-log), and its log.
// The agent calls both from the pod's worker once the instance has
// exited, and applies terminationMessagePolicy and kubelet's limits.
// Runtimes without it report no termination messages.
type TerminationMessageReader interface {
	// TerminationMessage returns the last max bytes of the file instance
	// id of the pod wrote at its terminationMessagePath; ok is false when
	// there is no such file. The runtime must never read a file outside
	// the container for it (a symlink in the image leads nowhere else).
	TerminationMessage(ctx context.Context, podUID string, id ContainerID, max int) (msg []byte, ok bool, err error)
	// LogTail returns the end of instance id's log as kubectl logs shows
	// it (text only): its last lines lines, of those at most the last max
	// bytes.
	LogTail(ctx context.Context, podUID string, id ContainerID, lines, max int) ([]byte, error)
}

package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Failure-injection annotations, read from the pod's metadata. See the
// package documentation for their effect.
const (
	AnnotationImagePull     = "sim.podflow.io/image-pull"
	AnnotationSandbox       = "sim.podflow.io/sandbox"
	AnnotationMount         = "sim.podflow.io/mount"
	AnnotationReadiness     = "sim.podflow.io/readiness"
	AnnotationLiveness      = "sim.podflow.io/liveness"
	AnnotationStartup       = "sim.podflow.io/startup"
	AnnotationExitAfter     = "sim.podflow.io/exit-after"
	AnnotationExitCode      = "sim.podflow.io/exit-code"
	AnnotationIgnoreSIGTERM = "sim.podflow.io/ignore-sigterm"
	AnnotationInitExitCode  = "sim.podflow.io/init-exit-code"
	// AnnotationPostStart and AnnotationPreStop "fail" make the lifecycle
	// hooks' exec and httpGet handlers fail.
	AnnotationPostStart = "sim.podflow.io/post-start"
	AnnotationPreStop   = "sim.podflow.io/pre-stop"
	// AnnotationSidecarExitAfter makes sidecars exit 1 after a duration.
	AnnotationSidecarExitAfter = "sim.podflow.io/sidecar-exit-after"
	// AnnotationTeardown "N" makes the pod's first N RemovePodSandbox
	// calls fail (a network namespace that cannot be removed); "fail"
	// makes every one fail.
	AnnotationTeardown = "sim.podflow.io/teardown"
	// AnnotationTerminationMessage is what every container of the pod has
	// written at its terminationMessagePath when it exits;
	// AnnotationLog is what each has logged (lines separated by "\n").
	AnnotationTerminationMessage = "sim.podflow.io/termination-message"
	AnnotationLog                = "sim.podflow.io/log"
	// AnnotationEphemeralExitAfter makes ephemeral containers exit after
	// a duration, with AnnotationEphemeralExitCode (default 0).
	AnnotationEphemeralExitAfter = "sim.podflow.io/ephemeral-exit-after"
	AnnotationEphemeralExitCode  = "sim.podflow.io/ephemeral-exit-code"

	// Fail is the annotation value that injects a failure.
	Fail = "fail"
)

// Exit codes of stopped simulated containers: 128 + the signal.
const (
	ExitCodeSIGTERM = 143
	ExitCodeSIGKILL = 137
)

// Config configures a simulated runtime.
type Config struct {
	// PodCIDR is where pod IPs come from. Required.
	PodCIDR string
	// Capacity is what Capacity reports (quantity strings).
	Capacity map[string]string
	// Delays of each operation; zero is allowed (and fastest).
	SandboxDelay, MountDelay, PullDelay, StartDelay, StopDelay time.Duration
	// InitRunTime is how long an init container runs before exiting 0.
	InitRunTime time.Duration
	// Clock is the time source; nil means the wall clock.
	Clock nodeagent.Clock
	// AllowedUnsafeSysctls are sysctl patterns pods may set beyond the
	// safe set, as the Linux runtime's (kubelet's --allowed-unsafe-sysctls).
	AllowedUnsafeSysctls []string
	// Programs, when set, chooses what containers run (program.go); nil:
	// every container runs until stopped or as its annotations say.
	Programs Programs
	// LogMaxBytes bounds each container instance's log (logs.go); 0 is
	// DefaultLogMaxBytes.
	LogMaxBytes int
}

// DefaultConfig returns an instant runtime with 8 cpu, 32Gi and 110 pods.
func DefaultConfig(podCIDR string) Config {
	return Config{
		PodCIDR: podCIDR,
		Capacity: map[string]string{
			"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi",
		},
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if _, err := NewIPAM(c.PodCIDR); err != nil {
		return err
	}
	for _, d := range []time.Duration{c.SandboxDelay, c.MountDelay, c.PullDelay, c.StartDelay, c.StopDelay, c.InitRunTime} {
		if d < 0 {
			return fmt.Errorf("sim: negative delay %s", d)
		}
	}
	if c.LogMaxBytes < 0 {
		return fmt.Errorf("sim: negative LogMaxBytes %d", c.LogMaxBytes)
	}
	if err := nodeagent.ValidateSysctlPatterns(c.AllowedUnsafeSysctls); err != nil {
		return fmt.Errorf("sim: AllowedUnsafeSysctls: %w", err)
	}
	return nil
}

// Runtime is a simulated container runtime: sandboxes, images and
// containers exist only in memory, and containers run no process. It is safe
// for concurrent use.
type Runtime struct {
	cfg   Config
	clock nodeagent.Clock
	ipam  *IPAM
	done  chan struct{}  // closed by Close
	wg    sync.WaitGroup // programs and attach sessions' stdin copies

	mu     sync.Mutex
	closed bool
	images map[string]string // image -> digest
	pods   map[string]*simPod
	// teardowns counts the failed RemovePodSandbox calls per pod UID
	// (AnnotationTeardown).
	teardowns map[string]int
	// mounted is closed and replaced on every successful MountVolumes
	// (WaitVolume waits on it).
	mounted chan struct{}
	// gone are the removed pods whose logs are still read (a finished
	// pod's sandbox is removed at once, its logs are read after), by
	// namespace/name, the oldest first out past maxGone.
	gone      map[string]*simPod
	goneOrder []string
}

// maxGone bounds the removed pods whose logs a runtime keeps.
const maxGone = 256

var (
	_ nodeagent.Runtime                  = (*Runtime)(nil)
	_ nodeagent.TerminationMessageReader = (*Runtime)(nil)
)

type simPod struct {
	pod *corev1.Pod
	// sb.IP is the pod's address (addr): a netip.Addr beside it costs
	// 24 bytes a pod.
	sb      nodeagent.Sandbox
	created time.Time
	mounted bool
	gone    bool        // the sandbox was removed; guarded by Runtime.mu
	volumes []simVolume // what MountVolumes got, in the order first mounted
	exits   chan nodeagent.ContainerExit
	notify  func() // NotifyExits; guarded by Runtime.mu
	// removed is closed when the sandbox is removed; made by removedLocked
	// only for a send that waits (naturalExit), as a pod that is never
	// waited on need not hold one (~100 bytes a pod).
	removed    chan struct{}
	containers []*simCtr   // the instances kept, in the order started (a few: a slice, not a map)
	starts     []nameCount // instances started, by container name
	// prevLogs are the logs of each container's previous instance
	// (kubectl logs --previous); nil until a container restarts.
	prevLogs map[string]*prevLog
}

// addr is the pod's IP address, as allocated.
func (p *simPod) addr() netip.Addr {
	a, _ := netip.ParseAddr(p.sb.IP)
	return a
}

// closedCh is a closed channel: the removedLocked of a removed sandbox.
var closedCh = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// removedLocked returns a channel closed when the pod's sandbox is
// removed (closed already if it is), made on first use.
func (p *simPod) removedLocked() <-chan struct{} {
	if p.gone {
		return closedCh
	}
	if p.removed == nil {
		p.removed = make(chan struct{})
	}
	return p.removed
}

// container returns the pod's instance id, nil if it has none.
func (p *simPod) container(id nodeagent.ContainerID) *simCtr {
	for _, c := range p.containers {
		if c.info.ID == id {
			return c
		}
	}
	return nil
}

// nameCount is how many instances of the container name were started: a
// pod has a few containers, so a slice (a map costs ~200 bytes a pod).
type nameCount struct {
	name string
	n    int32
}

// started returns how many instances of container name were started.
func (p *simPod) started(name string) int32 {
	for _, c := range p.starts {
		if c.name == name {
			return c.n
		}
	}
	return 0
}

// start counts one more instance of container name.
func (p *simPod) start(name string) {
	for i := range p.starts {
		if p.starts[i].name == name {
			p.starts[i].n++
			return
		}
	}
	p.starts = append(p.starts, nameCount{name: name, n: 1})
}

// simVolume is one volume as the agent last mounted it. A pod has a few
// volumes of a few files each, so slices, not maps: a map of one or two
// entries costs ~300 bytes, and the bench's pods held two (the projected
// token volume's files and the pod's volumes by name).
type simVolume struct {
	name   string
	files  []simFile // by path
	mounts int       // MountVolumes calls that carried this volume
	used   int64     // bytes, as SetVolumeUsage set them
}

// simFile is one file of a mounted volume; data is shared with the
// agent's VolumeData, which does not change it after the mount.
type simFile struct {
	path string
	data []byte
}

// volume returns the pod's volume name, nil if none was mounted. The
// pointer is good until the next mount (r.mu held throughout).
func (p *simPod) volume(name string) *simVolume {
	for i := range p.volumes {
		if p.volumes[i].name == name {
			return &p.volumes[i]
		}
	}
	return nil
}

// fileMap is a copy of the volume's files by path (nil when it has none).
func (v *simVolume) fileMap() map[string][]byte {
	if v == nil || len(v.files) == 0 {
		return nil
	}
	out := make(map[string][]byte, len(v.files))
	for _, f := range v.files {
		out[f.path] = f.data
	}
	return out
}

// simFiles is files as a slice, by path.
func simFiles(files map[string][]byte) []simFile {
	if len(files) == 0 {
		return nil
	}
	out := make([]simFile, 0, len(files))
	for path, data := range files {
		out = append(out, simFile{path: path, data: data})
	}
	slices.SortFunc(out, func(x, y simFile) int { return strings.Compare(x.path, y.path) })
	return out
}

type simCtr struct {
	info   nodeagent.ContainerInfo
	timer  nodeagent.Timer       // natural exit, nil if none
	target nodeagent.ContainerID // an ephemeral container's target, if any
	log    *logBuf
	// program: the instance runs a Program (cancel stops it; stdin, when
	// the container has one, is what attach writes to).
	cancel    context.CancelFunc
	stdin     *io.PipeWriter
	program   bool
	stdinOnce bool
	// why says which annotation made it exit (its synthetic exit line);
	// probes is each probe kind's last result (logged when it changes).
	why    string
	probes map[nodeagent.ProbeKind]bool
	spec   *corev1.Container // as the agent resolved it
}

// New returns a simulated runtime.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ipam, _ := NewIPAM(cfg.PodCIDR)
	if cfg.Clock == nil {
		cfg.Clock = nodeagent.RealClock{}
	}
	return &Runtime{cfg: cfg, clock: cfg.Clock, ipam: ipam, done: make(chan struct{}),
		images: map[string]string{}, pods: map[string]*simPod{}, mounted: make(chan struct{})}, nil
}

// Close stops every pending simulated exit. The runtime must not be used
// afterwards. Idempotent.
func (r *Runtime) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	close(r.done)
	for _, p := range r.pods {
		for _, c := range p.containers {
			if c.timer != nil {
				c.timer.Stop()
			}
			if c.cancel != nil {
				c.cancel()
			}
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// IPAM exposes the runtime's address allocator (for inspection).
func (r *Runtime) IPAM() *IPAM { return r.ipam }

var _ nodeagent.RuntimeVersioner = (*Runtime)(nil)

var _ nodeagent.VolumeMeter = (*Runtime)(nil)

// RuntimeVersion names the simulated runtime in Node.status.nodeInfo.
func (r *Runtime) RuntimeVersion() string { return "podflow-sim://" + nodeagent.Version() }

func (r *Runtime) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

func injected(pod *corev1.Pod, ann string) bool {
	return pod.GetMetadata().GetAnnotations()[ann] == Fail
}

// RunPodSandbox implements nodeagent.Runtime.
func (r *Runtime) RunPodSandbox(ctx context.Context, pod *corev1.Pod) (nodeagent.Sandbox, error) {
	uid := pod.GetMetadata().GetUid()
	r.mu.Lock()
	if p, ok := r.pods[uid]; ok {
		r.mu.Unlock()
		return p.sb, nil
	}
	r.mu.Unlock()
	if _, err := nodeagent.PodSysctls(pod, r.cfg.AllowedUnsafeSysctls); err != nil {
		return nodeagent.Sandbox{}, err // SysctlForbidden, as the Linux runtime
	}
	if err := r.sleep(ctx, r.cfg.SandboxDelay); err != nil {
		return nodeagent.Sandbox{}, err
	}
	if injected(pod, AnnotationSandbox) {
		return nodeagent.Sandbox{}, nodeagent.Errorf(nodeagent.CodeSandbox,
			"rpc error: code = Unknown desc = failed to setup network for sandbox: sim: failure injected by %s", AnnotationSandbox)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pods[uid]; ok {
		return p.sb, nil
	}
	ip, err := r.ipam.Allocate(uid)
	if err != nil {
		return nodeagent.Sandbox{}, nodeagent.Errorf(nodeagent.CodeSandbox,
			"failed to setup network for sandbox: allocate IP: %w", err)
	}
	p := &simPod{
		pod: pod, created: r.clock.Now(),
		sb: nodeagent.Sandbox{ID: r.newID("sandbox"), IP: ip.String()},
		// One slot: naturalExit's send waits for the worker (or the
		// sandbox's removal), so a longer buffer only costs memory, ~1.5 KB
		// a pod at 16.
		exits: make(chan nodeagent.ContainerExit, 1),
	}
	r.pods[uid] = p
	return p.sb, nil
}

// idSeq numbers the ids of every Runtime of the process, from the start
// time, so that a restarted process does not hand out its predecessor's.
var idSeq atomic.Uint64

func init() { idSeq.Store(uint64(time.Now().UnixNano())) }

func (r *Runtime) newID(kind string) string {
	// One sequence for every runtime of the process keeps the ids of two
	// runtimes apart; built without fmt (6% of a simulated cluster's CPU).
	var b [48]byte
	buf := append(append(b[:0], kind...), '/')
	buf = strconv.AppendUint(buf, idSeq.Add(1), 10)
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:16])
}

// StopPodSandbox implements nodeagent.Runtime: every container still
// running is killed.
func (r *Runtime) StopPodSandbox(ctx context.Context, podUID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pods[podUID]; ok {
		now := r.clock.Now()
		for _, c := range p.containers {
			if c.info.Running {
				c.why = "the pod's sandbox was stopped"
				r.exitLocked(c, nodeagent.ContainerExit{ID: c.info.ID, ExitCode: ExitCodeSIGKILL, Signal: 9, FinishedAt: now})
			}
		}
	}
	return ctx.Err()
}

// RemovePodSandbox implements nodeagent.Runtime and releases the pod's IP.
func (r *Runtime) RemovePodSandbox(ctx context.Context, podUID string) error {
	if err := r.StopPodSandbox(ctx, podUID); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pods[podUID]; ok {
		if v := p.pod.GetMetadata().GetAnnotations()[AnnotationTeardown]; v != "" {
			n, err := strconv.Atoi(v)
			if v == Fail || err == nil && r.teardowns[podUID] < n {
				if r.teardowns == nil {
					r.teardowns = map[string]int{}
				}
				r.teardowns[podUID]++
				return fmt.Errorf("remove netns %q: device or resource busy: sim: failure injected by %s", "podflow-sim-"+podUID, AnnotationTeardown)
			}
			delete(r.teardowns, podUID)
		}
		p.gone = true
		if p.removed != nil {
			close(p.removed)
		}
		r.ipam.Release(p.addr())
		delete(r.pods, podUID)
		r.keepGoneLocked(p)
	}
	return nil
}

// MountVolumes implements nodeagent.Runtime.
func (r *Runtime) MountVolumes(ctx context.Context, pod *corev1.Pod, vols []nodeagent.VolumeData) error {
	if err := r.sleep(ctx, r.cfg.MountDelay); err != nil {
		return err
	}
	if injected(pod, AnnotationMount) {
		name := "volume"
		if len(vols) > 0 {
			name = vols[0].Volume.GetName()
		}
		return nodeagent.Errorf(nodeagent.CodeMount,
			"MountVolume.SetUp failed for volume %q : sim: failure injected by %s", name, AnnotationMount)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[pod.GetMetadata().GetUid()]
	if !ok {
		return nodeagent.Errorf(nodeagent.CodeMount, "pod %q has no sandbox", pod.GetMetadata().GetUid())
	}
	p.mounted = true
	for _, vd := range vols {
		v := p.volume(vd.Volume.GetName())
		if v == nil {
			p.volumes = append(p.volumes, simVolume{name: vd.Volume.GetName()})
			v = &p.volumes[len(p.volumes)-1]
		}
		v.files = simFiles(vd.Files)
		v.mounts++
	}
	close(r.mounted)
	r.mounted = make(chan struct{})
	return nil
}

// WaitVolume waits until cond holds for volume name of the pod as the
// agent last mounted it: its files and how many MountVolumes calls
// carried it (0: none yet). It returns ctx's error when ctx ends first.
func (r *Runtime) WaitVolume(ctx context.Context, podUID, name string, cond func(files map[string][]byte, mounts int) bool) error {
	for {
		r.mu.Lock()
		var files map[string][]byte
		mounts := 0
		if p := r.pods[podUID]; p != nil {
			if v := p.volume(name); v != nil {
				files, mounts = v.fileMap(), v.mounts
			}
		}
		ch := r.mounted
		r.mu.Unlock()
		if cond(files, mounts) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sim: volume %q of pod %q (%d mounts, files %q): %w", name, podUID, mounts, files, ctx.Err())
		case <-ch:
		}
	}
}

// SetVolumeUsage makes the pod's volume name report used bytes to
// VolumeUsage from now on: what a simulated container wrote into it.
func (r *Runtime) SetVolumeUsage(podUID, name string, used int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[podUID]
	if !ok || p.volume(name) == nil {
		return fmt.Errorf("sim: pod %q has no volume %q mounted", podUID, name)
	}
	p.volume(name).used = used
	return nil
}

// VolumeUsage implements nodeagent.VolumeMeter: the bytes SetVolumeUsage
// set (0 until then).
func (r *Runtime) VolumeUsage(ctx context.Context, pod *corev1.Pod, name string) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[pod.GetMetadata().GetUid()]
	if !ok || p.volume(name) == nil {
		return 0, fmt.Errorf("sim: pod %q has no volume %q mounted", pod.GetMetadata().GetUid(), name)
	}
	return p.volume(name).used, nil
}

// PullImage implements nodeagent.Runtime.
func (r *Runtime) PullImage(ctx context.Context, pod *corev1.Pod, image, policy string) (nodeagent.ImageRef, error) {
	r.mu.Lock()
	digest, present := r.images[image]
	r.mu.Unlock()
	if injected(pod, AnnotationImagePull) {
		return nodeagent.ImageRef{}, nodeagent.Errorf(nodeagent.CodeImagePull,
			"rpc error: code = NotFound desc = failed to pull and unpack image %q: sim: failure injected by %s", image, AnnotationImagePull)
	}
	switch {
	case present && policy != "Always":
		return nodeagent.ImageRef{ID: digest, SizeBytes: 10 << 20, AlreadyPresent: true}, nil
	case !present && policy == "Never":
		return nodeagent.ImageRef{}, nodeagent.Errorf(nodeagent.CodeImageNeverPull,
			"Container image %q is not present with pull policy of Never", image)
	}
	if err := r.sleep(ctx, r.cfg.PullDelay); err != nil {
		return nodeagent.ImageRef{}, err
	}
	sum := sha256.Sum256([]byte(image))
	digest = image + "@sha256:" + hex.EncodeToString(sum[:])
	r.mu.Lock()
	r.images[image] = digest
	r.mu.Unlock()
	return nodeagent.ImageRef{ID: digest, SizeBytes: 10 << 20}, nil
}

// StartContainer implements nodeagent.Runtime. Init containers exit 0 after
// Config.InitRunTime; sidecars (restartPolicy Always) run until stopped or
// as sidecar-exit-after says; app containers run until stopped, or exit as
// the exit-after and exit-code annotations say.
func (r *Runtime) StartContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sb nodeagent.Sandbox) (nodeagent.ContainerID, error) {
	if err := r.sleep(ctx, r.cfg.StartDelay); err != nil {
		return "", err
	}
	init, sidecar := false, false
	for _, ic := range pod.GetSpec().GetInitContainers() {
		if ic.GetName() == c.GetName() {
			init, sidecar = true, ic.GetRestartPolicy() == "Always"
		}
	}
	ann := pod.GetMetadata().GetAnnotations()
	var exitAfter time.Duration
	var exitCode int64
	exits := init && !sidecar
	why := "" // the annotations that decide its exit, if any
	switch {
	case sidecar: // runs until stopped, or exits 1 as the annotation says
		if s, ok := ann[AnnotationSidecarExitAfter]; ok {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "sim: annotation %s=%q is not a duration", AnnotationSidecarExitAfter, s)
			}
			exits, exitAfter, exitCode, why = true, d, 1, AnnotationSidecarExitAfter
		}
	case init:
		exitAfter = r.cfg.InitRunTime
		if s, ok := ann[AnnotationInitExitCode]; ok {
			code, err := strconv.ParseInt(s, 10, 32)
			if err != nil {
				return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "sim: annotation %s=%q is not an integer", AnnotationInitExitCode, s)
			}
			exitCode, why = code, AnnotationInitExitCode
		}
	default:
		s, ok := ann[AnnotationExitAfter]
		if !ok {
			break
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "sim: annotation %s=%q is not a duration", AnnotationExitAfter, s)
		}
		code, err := strconv.ParseInt(ann[AnnotationExitCode], 10, 32)
		if err != nil && ann[AnnotationExitCode] != "" {
			return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "sim: annotation %s=%q is not an integer", AnnotationExitCode, ann[AnnotationExitCode])
		}
		exits, exitAfter, exitCode, why = true, d, code, AnnotationExitAfter+"="+s
		if ann[AnnotationExitCode] != "" {
			why += ", " + AnnotationExitCode + "=" + ann[AnnotationExitCode]
		}
	}
	return r.addContainer(pod, c, sb, init, "", exits, exitAfter, int32(exitCode), why)
}

// StartEphemeralContainer implements nodeagent.EphemeralStarter: the
// container runs until stopped, or exits as the ephemeral-exit-after and
// ephemeral-exit-code annotations say; a target must be a running
// container of the pod (its PID namespace is the one joined).
func (r *Runtime) StartEphemeralContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sb nodeagent.Sandbox, target nodeagent.ContainerID) (nodeagent.ContainerID, error) {
	if err := r.sleep(ctx, r.cfg.StartDelay); err != nil {
		return "", err
	}
	ann := pod.GetMetadata().GetAnnotations()
	var exitAfter time.Duration
	var code int64
	s, exits := ann[AnnotationEphemeralExitAfter]
	if exits {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "sim: annotation %s=%q is not a duration", AnnotationEphemeralExitAfter, s)
		}
		exitAfter = d
		if v := ann[AnnotationEphemeralExitCode]; v != "" {
			if code, err = strconv.ParseInt(v, 10, 32); err != nil {
				return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "sim: annotation %s=%q is not an integer", AnnotationEphemeralExitCode, v)
			}
		}
	}
	why := ""
	if exits {
		why = AnnotationEphemeralExitAfter + "=" + s
	}
	return r.addContainer(pod, c, sb, false, target, exits, exitAfter, int32(code), why)
}

var _ nodeagent.EphemeralStarter = (*Runtime)(nil)

// EphemeralTarget returns the container instance whose PID namespace
// ephemeral container id joined ("" when none, or not ephemeral).
func (r *Runtime) EphemeralTarget(id nodeagent.ContainerID) nodeagent.ContainerID {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, _ := r.findLocked(id); c != nil {
		return c.target
	}
	return ""
}

// addContainer records a started container; one that exits does so with
// code after exitAfter. A target must be a running container of the pod.
// A container whose exit no annotation decides (why) runs the Program
// Config.Programs gives it, if any.
func (r *Runtime) addContainer(pod *corev1.Pod, c *corev1.Container, sb nodeagent.Sandbox, init bool, target nodeagent.ContainerID,
	exits bool, exitAfter time.Duration, exitCode int32, why string) (nodeagent.ContainerID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return "", nodeagent.Errorf(nodeagent.CodeRunContainer, "sim: runtime closed")
	}
	p, ok := r.pods[pod.GetMetadata().GetUid()]
	if !ok || p.sb.ID != sb.ID {
		return "", nodeagent.Errorf(nodeagent.CodeRunContainer, "sim: pod %q has no sandbox %q", pod.GetMetadata().GetUid(), sb.ID)
	}
	if target != "" {
		if tc := p.container(target); tc == nil || !tc.info.Running {
			return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "sim: target container %q of pod %q is not running", target, pod.GetMetadata().GetUid())
		}
	}
	id := nodeagent.ContainerID("sim://" + r.newID("container"))
	sc := &simCtr{info: nodeagent.ContainerInfo{
		ID: id, PodUID: pod.GetMetadata().GetUid(), Name: c.GetName(), Image: c.GetImage(),
		ImageID: r.images[c.GetImage()], Init: init, RestartCount: p.started(c.GetName()),
		Running: true, StartedAt: r.clock.Now(),
	}, target: target, log: newLogBuf(r.cfg.LogMaxBytes), why: why, spec: c}
	p.containers = slices.DeleteFunc(p.containers, func(oc *simCtr) bool { // keep one dead instance per name, as kubelet does
		if oc.info.Name != c.GetName() || oc.info.Running {
			return false
		}
		if p.prevLogs == nil {
			p.prevLogs = map[string]*prevLog{}
		}
		p.prevLogs[c.GetName()] = &prevLog{id: oc.info.ID, log: oc.log} // kubectl logs --previous
		return true
	})
	p.start(c.GetName())
	p.containers = append(p.containers, sc)
	var prog Program
	if r.cfg.Programs != nil && why == "" {
		prog = r.cfg.Programs.Program(pod, c, p.sb.IP, volumeFilesLocked(p))
	}
	if prog != nil {
		sc.program = true
		r.startProgramLocked(p, sc, c, prog)
		return id, nil
	}
	r.startLinesLocked(pod, sc, c)
	if exits {
		sc.timer = r.clock.AfterFunc(exitAfter, func() { r.naturalExit(p, sc, exitCode) })
	}
	return id, nil
}

// naturalExit ends a container on its own and reports it on the pod's exit
// channel, unless the agent stopped it first or the sandbox is gone.
func (r *Runtime) naturalExit(p *simPod, c *simCtr, code int32) {
	r.mu.Lock()
	if !c.info.Running || r.closed {
		r.mu.Unlock()
		return
	}
	ex := nodeagent.ContainerExit{ID: c.info.ID, ExitCode: code, FinishedAt: r.clock.Now()}
	r.exitLocked(c, ex)
	removed := p.removedLocked()
	r.mu.Unlock()
	select {
	case p.exits <- ex:
	case <-removed:
		return
	case <-r.done:
		return
	}
	r.mu.Lock()
	notify := p.notify
	r.mu.Unlock()
	if notify != nil {
		notify()
	}
}

func (r *Runtime) exitLocked(c *simCtr, ex nodeagent.ContainerExit) {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.cancel != nil {
		c.cancel()
	}
	why := ""
	if c.why != "" {
		why = " (" + c.why + ")"
	}
	r.syntheticLocked(c, "%s", exitLine(ex, why))
	c.info.Running = false
	c.info.Exit = &ex
	c.log.wake() // followers see that it exited
}

// StopContainer implements nodeagent.Runtime: the container exits with 143
// after Config.StopDelay, or, when the pod has the ignore-sigterm
// annotation, with 137 once grace has passed.
func (r *Runtime) StopContainer(ctx context.Context, id nodeagent.ContainerID, grace time.Duration) (nodeagent.ContainerExit, error) {
	r.mu.Lock()
	c, p := r.findLocked(id)
	if c == nil {
		r.mu.Unlock()
		return nodeagent.ContainerExit{}, nodeagent.Errorf(nodeagent.CodeNotFound, "sim: no container %q", id)
	}
	if !c.info.Running {
		ex := *c.info.Exit
		r.mu.Unlock()
		return ex, nil
	}
	if c.timer != nil {
		c.timer.Stop() // it dies of the signal, not on its own
	}
	ignore := p.pod.GetMetadata().GetAnnotations()[AnnotationIgnoreSIGTERM] == "true"
	c.why = "the grace period of " + grace.String() + " ended"
	if ignore {
		c.why = AnnotationIgnoreSIGTERM + "=true: " + c.why
	}
	r.mu.Unlock()
	ex := nodeagent.ContainerExit{ID: id, ExitCode: ExitCodeSIGTERM, Signal: 15}
	wait := r.cfg.StopDelay
	if ignore || wait > grace {
		ex.ExitCode, ex.Signal, wait = ExitCodeSIGKILL, 9, grace
	}
	if err := r.sleep(ctx, wait); err != nil {
		return nodeagent.ContainerExit{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !c.info.Running { // it exited (or the sandbox stopped) meanwhile
		return *c.info.Exit, nil
	}
	ex.FinishedAt = r.clock.Now()
	r.exitLocked(c, ex)
	return ex, nil
}

func (r *Runtime) findLocked(id nodeagent.ContainerID) (*simCtr, *simPod) {
	for _, p := range r.pods {
		if c := p.container(id); c != nil {
			return c, p
		}
	}
	return nil, nil
}

// NotifyExits implements nodeagent.Runtime.
func (r *Runtime) NotifyExits(podUID string, notify func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pods[podUID]; ok {
		p.notify = notify
	}
}

// ContainerExits implements nodeagent.Runtime.
func (r *Runtime) ContainerExits(podUID string) <-chan nodeagent.ContainerExit {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pods[podUID]; ok {
		return p.exits
	}
	return nil
}

// Probe implements nodeagent.Runtime: a probe (or a lifecycle hook's exec
// or httpGet) fails when the pod's annotation for its kind is "fail", and
// succeeds otherwise.
func (r *Runtime) Probe(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id nodeagent.ContainerID, kind nodeagent.ProbeKind, p *corev1.Probe) (nodeagent.ProbeResult, error) {
	ann := map[nodeagent.ProbeKind]string{
		nodeagent.ProbeStartup: AnnotationStartup, nodeagent.ProbeLiveness: AnnotationLiveness, nodeagent.ProbeReadiness: AnnotationReadiness,
		nodeagent.HookPostStart: AnnotationPostStart, nodeagent.HookPreStop: AnnotationPreStop,
	}[kind]
	res := nodeagent.ProbeResult{OK: true}
	if injected(pod, ann) {
		res = nodeagent.ProbeResult{Message: "sim: failure injected by " + ann}
	}
	r.probeLine(id, kind, p, res)
	if !res.OK {
		return res, nil
	}
	return res, ctx.Err()
}

// ListSandboxes implements nodeagent.Runtime.
func (r *Runtime) ListSandboxes(ctx context.Context) ([]nodeagent.SandboxInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]nodeagent.SandboxInfo, 0, len(r.pods))
	for uid, p := range r.pods {
		out = append(out, nodeagent.SandboxInfo{PodUID: uid, Namespace: p.pod.GetMetadata().GetNamespace(),
			Name: p.pod.GetMetadata().GetName(), Sandbox: p.sb, VolumesReady: p.mounted, CreatedAt: p.created})
	}
	return out, ctx.Err()
}

// ListContainers implements nodeagent.Runtime.
func (r *Runtime) ListContainers(ctx context.Context, podUID string) ([]nodeagent.ContainerInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[podUID]
	if !ok {
		return nil, ctx.Err()
	}
	out := make([]nodeagent.ContainerInfo, 0, len(p.containers))
	for _, c := range p.containers {
		info := c.info
		if info.Exit != nil {
			ex := *info.Exit
			info.Exit = &ex
		}
		out = append(out, info)
	}
	return out, ctx.Err()
}

// Capacity implements nodeagent.Runtime: Config.Capacity itself, read
// only (the agent copies what it reports).
func (r *Runtime) Capacity() map[string]string { return r.cfg.Capacity }

// Pods counts the sandboxes that exist.
func (r *Runtime) Pods() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pods)
}

// TerminationMessage implements nodeagent.TerminationMessageReader: the
// pod's termination-message annotation, its last max bytes; none without
// the annotation.
func (r *Runtime) TerminationMessage(ctx context.Context, podUID string, id nodeagent.ContainerID, max int) ([]byte, bool, error) {
	ann, err := r.containerAnnotation(podUID, id, AnnotationTerminationMessage)
	if err != nil || ann == nil {
		return nil, false, err
	}
	b := []byte(*ann)
	return b[len(b)-min(len(b), max):], true, ctx.Err()
}

// LogTail implements nodeagent.TerminationMessageReader: the last lines
// lines of what instance id logged (its program's output, or what the
// log annotation says; never the runtime's synthetic lines), at most its
// last max bytes.
func (r *Runtime) LogTail(ctx context.Context, podUID string, id nodeagent.ContainerID, lines, max int) ([]byte, error) {
	r.mu.Lock()
	var cri []byte
	if p, ok := r.pods[podUID]; ok && p.container(id) != nil {
		c := p.container(id)
		cri, _ = c.log.read(0, c.log.max)
	}
	r.mu.Unlock()
	var text []string
	for _, line := range strings.Split(string(nodeLogText(cri)), "\n") {
		if !strings.HasPrefix(line, SyntheticPrefix) {
			text = append(text, line)
		}
	}
	if len(text) > 0 && text[len(text)-1] == "" {
		text = text[:len(text)-1]
	}
	if len(text) == 0 {
		return nil, ctx.Err()
	}
	b := []byte(strings.Join(text[len(text)-min(len(text), lines):], "\n") + "\n")
	return b[len(b)-min(len(b), max):], ctx.Err()
}

// nodeLogText is the text of CRI records, as kubectl logs prints it.
func nodeLogText(cri []byte) []byte {
	var b bytes.Buffer
	_ = writeRecords(cri, &b, &b, true)
	return b.Bytes()
}

// containerAnnotation returns the annotation ann of the pod of instance
// id (nil: not set, or no such instance).
func (r *Runtime) containerAnnotation(podUID string, id nodeagent.ContainerID, ann string) (*string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[podUID]
	if !ok || p.container(id) == nil {
		return nil, nil // gone: it left nothing
	}
	v, ok := p.pod.GetMetadata().GetAnnotations()[ann]
	if !ok {
		return nil, nil
	}
	return &v, nil
}

// probeLine logs a probe's first result and every change of it in the
// container's synthetic log.
func (r *Runtime) probeLine(id nodeagent.ContainerID, kind nodeagent.ProbeKind, p *corev1.Probe, res nodeagent.ProbeResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, _ := r.findLocked(id)
	if c == nil || c.program {
		return
	}
	if last, ok := c.probes[kind]; ok && last == res.OK {
		return
	}
	if c.probes == nil {
		c.probes = map[nodeagent.ProbeKind]bool{}
	}
	c.probes[kind] = res.OK
	what := strings.ToLower(string(kind))
	switch kind {
	case nodeagent.HookPostStart, nodeagent.HookPreStop:
		what += " hook"
	default:
		what += " probe"
	}
	if h := p.GetHttpGet(); h != nil {
		what += fmt.Sprintf(" httpGet %s", h.GetPath())
	} else if e := p.GetExec(); e != nil {
		what += fmt.Sprintf(" exec %q", strings.Join(e.GetCommand(), " "))
	} else if t := p.GetTcpSocket(); t != nil {
		what += " tcpSocket"
	}
	if res.OK {
		r.syntheticLocked(c, "%s succeeded", what)
	} else {
		r.syntheticLocked(c, "%s failed: %s", what, res.Message)
	}
}

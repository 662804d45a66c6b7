package linux

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/cgroups"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/image"
	"github.com/podflow/podflow/nodeagent/linux/network"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Runtime runs pods on this Linux machine: a cgroup per pod and container
// (package cgroups), a network namespace with a veth and an IP per pod
// (package network), OCI images unpacked into a rootfs per container
// (package image), and a shim-supervised process per container (package
// container). Everything it creates is recorded under Config.DataDir, so a
// new Runtime on the same directory adopts the pods an earlier agent left.
//
// Concurrency: safe for concurrent use across pods; the calls for one pod
// come from one goroutine (the agent's pod worker).
type Runtime struct {
	cfg    Config
	log    *slog.Logger
	net    *network.Manager
	cg     *cgroups.Manager
	images *image.Store
	spares *container.Spares // nil: no spare shims
	// nodeLock and dataLock are held from New to Close (nodelock.go).
	nodeLock, dataLock *nodeLock

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
	once sync.Once
	// lockOnce releases the locks once.
	lockOnce sync.Once

	mu        sync.Mutex
	pods      map[string]*pod
	unpacking map[string]*sync.Mutex // image rootfs dir → its unpack lock
	starting  map[string]bool        // ids of containers being started (devcgroups.go)
}

var _ nodeagent.Runtime = (*Runtime)(nil)

// podRecord is a sandbox as persisted in pods/<uid>/pod.json.
type podRecord struct {
	UID          string             `json:"uid"`
	Namespace    string             `json:"namespace"`
	Name         string             `json:"name"`
	QOS          string             `json:"qos"`
	SandboxID    string             `json:"sandboxId"`
	Net          network.Attachment `json:"net"`
	CreatedAt    time.Time          `json:"createdAt"`
	VolumesReady bool               `json:"volumesReady"`
	Starts       map[string]int32   `json:"starts"`           // container name → instances started
	Mounts       []string           `json:"mounts,omitempty"` // host mounts to remove (secret tmpfs)
	// PIDNamespace is the holder of the pod's shared PID namespace
	// (shareProcessNamespace), killed by StopPodSandbox.
	PIDNamespace *container.PIDNamespace `json:"pidNamespace,omitempty"`
	// Released: a finished pod's sandbox, released (ReleasePodSandbox):
	// its containers' records and logs remain, nothing else.
	Released bool `json:"released,omitempty"`
}

// ctrMeta is a container instance as persisted in containers/<id>/meta.json.
type ctrMeta struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Image        string    `json:"image"`
	ImageID      string    `json:"imageId"`
	Init         bool      `json:"init"`
	RestartCount int32     `json:"restartCount"`
	CreatedAt    time.Time `json:"createdAt"`
	Env          []string  `json:"env"`
	WorkingDir   string    `json:"workingDir"`
}

type pod struct {
	dir     string
	rec     podRecord
	exits   chan nodeagent.ContainerExit
	notify  func() // NotifyExits; guarded by Runtime.mu
	removed chan struct{}
	// removing: RemovePodSandbox has begun deleting the pod's directory,
	// logs included, so they are no longer served; guarded by Runtime.mu.
	removing bool
	ctrs     map[nodeagent.ContainerID]*ctr
}

type ctr struct {
	meta ctrMeta
	c    *container.Container
	// known: the exit was known when the container was found (recovery),
	// so ListContainers reports it and it is not delivered again.
	known bool
	// claimed: the exit belongs to StopContainer/StopPodSandbox or was
	// delivered on the exit channel; set under Runtime.mu.
	claimed bool
}

// New checks the machine, takes the node's lock, prepares the node's
// bridge and cgroup hierarchy and adopts the pods recorded under
// cfg.DataDir. It refuses to run without root, cgroups or network
// namespaces, next to a live agent of the same node name or DataDir
// (ErrNodeInUse), and over the pods of a stopped agent of the same node
// name with another DataDir (ErrForeignLeftovers).
func New(cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := Check(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger, done: make(chan struct{}), pods: map[string]*pod{},
		unpacking: map[string]*sync.Mutex{}, starting: map[string]bool{}}
	var err error
	ok := false
	defer func() {
		if !ok {
			r.closeParts()
		}
	}()
	var prev lockRecord
	if r.nodeLock, r.dataLock, prev, err = lockNode(cfg); err != nil {
		return nil, err
	}
	if prev.DataDir != "" && prev.DataDir != cfg.DataDir {
		r.log.Warn("removing the leftovers of a stopped agent of this node", "dataDir", prev.DataDir, "pid", prev.PID)
	}
	if r.cg, err = cgroups.New(cfg.Cgroups); err != nil {
		return nil, fmt.Errorf("%w: %w (use --runtime sim on this machine)", ErrUnavailable, err)
	}
	if r.net, err = network.New(cfg.Network); err != nil {
		return nil, fmt.Errorf("%w: %w (use --runtime sim on this machine)", ErrUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.net.EnsureBridge(ctx); err != nil {
		return nil, fmt.Errorf("%w: bridge: %w", ErrUnavailable, err)
	}
	if r.images, err = image.NewStore(cfg.Image); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.podsDir(), 0o700); err != nil {
		return nil, err
	}
	if err := r.recover(ctx); err != nil {
		return nil, err
	}
	if cfg.SpareShims > 0 {
		if r.spares, err = container.NewSpares(cfg.Container, cfg.SpareShims); err != nil {
			return nil, err
		}
	}
	ok = true
	r.wg.Add(1)
	go r.deviceCgroupGC()
	return r, nil
}

// Check reports whether this machine can run pods: root, a cgroup
// filesystem and network namespaces. The error says to use the simulated
// runtime otherwise.
func Check() error {
	hint := "(use --runtime sim on this machine)"
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: needs Linux %s", ErrUnavailable, hint)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root to create cgroups, network namespaces and mounts %s", ErrUnavailable, hint)
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return fmt.Errorf("%w: no network namespaces: %v %s", ErrUnavailable, err, hint)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return fmt.Errorf("%w: no cgroup filesystem at /sys/fs/cgroup: %v %s", ErrUnavailable, err, hint)
	}
	return nil
}

// Close stops watching containers; pods keep running and a new Runtime on
// the same DataDir adopts them. Idempotent.
func (r *Runtime) Close() error {
	r.once.Do(func() { close(r.done) })
	r.mu.Lock()
	for _, p := range r.pods {
		for _, c := range p.ctrs {
			c.c.Close()
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
	return r.closeParts()
}

func (r *Runtime) closeParts() error {
	if r.spares != nil {
		r.spares.Close()
	}
	var errs []error
	if r.images != nil {
		errs = append(errs, r.images.Close())
	}
	if r.net != nil {
		errs = append(errs, r.net.Close())
	}
	r.lockOnce.Do(func() { errs = append(errs, r.nodeLock.Close(), r.dataLock.Close()) })
	return errors.Join(errs...)
}

// Images is the node's image store (for Node.status.images).
func (r *Runtime) Images() *image.Store { return r.images }

// Network is the node's pod network (for routes to peer nodes).
func (r *Runtime) Network() *network.Manager { return r.net }

func (r *Runtime) podsDir() string          { return filepath.Join(r.cfg.DataDir, "pods") }
func (r *Runtime) podDir(uid string) string { return filepath.Join(r.podsDir(), uid) }
func ctrDir(p *pod, id string) string       { return filepath.Join(p.dir, "containers", id) }
func logPath(p *pod, name string, n int32) string {
	return filepath.Join(p.dir, "logs", name, strconv.Itoa(int(n))+".log")
}

func (r *Runtime) trace(uid, step string, since time.Time) {
	if r.cfg.Trace != nil {
		r.cfg.Trace(uid, step, time.Since(since))
	}
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func (r *Runtime) savePod(p *pod) error {
	return container.WriteJSON(filepath.Join(p.dir, "pod.json"), p.rec)
}

// recover adopts the pods recorded on disk and removes what the kernel
// holds for pods that have no record (an agent that died half-way).
func (r *Runtime) recover(ctx context.Context) error {
	entries, err := os.ReadDir(r.podsDir())
	if err != nil {
		return err
	}
	for _, e := range entries {
		dir := filepath.Join(r.podsDir(), e.Name())
		var rec podRecord
		if err := readJSON(filepath.Join(dir, "pod.json"), &rec); err != nil {
			r.log.Warn("drop pod directory without a record", "dir", dir, "err", err)
			r.removePodParts(ctx, e.Name(), "", nil)
			_ = os.RemoveAll(dir)
			continue
		}
		p := r.newPod(dir, rec)
		cdirs, _ := os.ReadDir(filepath.Join(dir, "containers"))
		for _, cd := range cdirs {
			var meta ctrMeta
			if err := readJSON(filepath.Join(ctrDir(p, cd.Name()), "meta.json"), &meta); err != nil {
				continue
			}
			c, err := container.Open(ctrDir(p, cd.Name()))
			if err != nil {
				continue // never started
			}
			known := false
			select {
			case <-c.Done():
				known = true
			default:
			}
			r.addCtr(p, &ctr{meta: meta, c: c, known: known, claimed: known})
		}
		r.pods[rec.UID] = p
	}
	// Kernel state without a pod record: left by an agent of this node
	// that died half-way, or whose data directory is gone (its lock is
	// free, see nodelock.go). No agent can adopt such a pod, so its
	// processes are killed and everything of it removed. One that cannot be
	// removed is logged and keeps its address; it never stops the agent
	// from starting.
	atts, err := r.net.List(ctx)
	if err != nil {
		return agentError(err)
	}
	cgs, err := r.cg.ListPods(ctx)
	if err != nil {
		return err
	}
	orphans := map[string]bool{}
	for _, a := range atts {
		orphans[a.PodUID] = true
	}
	for _, uid := range cgs {
		orphans[uid] = true
	}
	for _, uid := range slices.Sorted(maps.Keys(orphans)) {
		if _, ok := r.pods[uid]; !ok {
			r.log.Warn("remove an orphaned pod", "pod", uid)
			if err := r.reapOrphan(ctx, uid); err != nil {
				r.log.Error("orphaned pod left in place", "pod", uid, "err", err)
			}
		}
	}
	r.sweepDeviceCgroups()
	stray, err := r.net.RemoveStrayPorts(ctx, slices.Collect(maps.Keys(r.pods)))
	if len(stray) > 0 {
		r.log.Warn("removed stray bridge ports", "links", stray)
	}
	if err != nil {
		r.log.Error("stray bridge ports left in place", "err", err)
	}
	return nil
}

// reapOrphan kills the processes of a pod no agent records (waiting up to
// StopTimeout) and removes its cgroups and network.
func (r *Runtime) reapOrphan(ctx context.Context, uid string) error {
	kctx, cancel := context.WithTimeout(ctx, r.cfg.StopTimeout)
	defer cancel()
	var errs []error
	if err := r.cg.KillPod(kctx, uid, ""); err != nil {
		errs = append(errs, err)
	}
	if err := r.cg.RemovePod(ctx, uid, ""); err != nil {
		errs = append(errs, err)
	}
	if err := r.net.Teardown(ctx, uid); err != nil {
		errs = append(errs, agentError(err))
	}
	return errors.Join(errs...)
}

func (r *Runtime) newPod(dir string, rec podRecord) *pod {
	if rec.Starts == nil {
		rec.Starts = map[string]int32{}
	}
	return &pod{dir: dir, rec: rec, exits: make(chan nodeagent.ContainerExit, 16),
		removed: make(chan struct{}), ctrs: map[nodeagent.ContainerID]*ctr{}}
}

// addCtr registers c and starts its exit watcher. The caller holds r.mu or
// owns p exclusively.
func (r *Runtime) addCtr(p *pod, c *ctr) {
	id := nodeagent.ContainerID(c.meta.ID)
	p.ctrs[id] = c
	if c.known {
		return
	}
	r.wg.Add(1)
	go r.watch(p, c)
}

// watch delivers the exit of c on its pod's channel unless it was claimed.
func (r *Runtime) watch(p *pod, c *ctr) {
	defer r.wg.Done()
	select {
	case <-c.c.Done():
	case <-r.done:
		return
	case <-p.removed:
		return
	}
	r.mu.Lock()
	if c.claimed {
		r.mu.Unlock()
		return
	}
	c.claimed = true
	r.mu.Unlock()
	ex := r.exitOf(c)
	select {
	case p.exits <- ex:
	case <-p.removed:
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

// exitOf converts c's final state.
func (r *Runtime) exitOf(c *ctr) nodeagent.ContainerExit {
	st := c.c.State()
	ex := nodeagent.ContainerExit{ID: nodeagent.ContainerID(c.meta.ID), ExitCode: int32(st.ExitCode),
		Signal: int32(st.Signal), Message: st.Error, FinishedAt: st.FinishedAt}
	if st.OOMKilled {
		ex.Reason = "OOMKilled"
	}
	return ex
}

// RunPodSandbox implements nodeagent.Runtime: the pod's cgroup, then its
// network namespace, veth pair and IP.
func (r *Runtime) RunPodSandbox(ctx context.Context, pd *corev1.Pod) (nodeagent.Sandbox, error) {
	md := pd.GetMetadata()
	uid := md.GetUid()
	r.mu.Lock()
	if p, ok := r.pods[uid]; ok {
		released := p.rec.Released
		r.mu.Unlock()
		if !released {
			return nodeagent.Sandbox{ID: p.rec.SandboxID, IP: p.rec.Net.IP}, nil
		}
		// A released sandbox runs nothing again: a new one replaces it.
		if err := r.RemovePodSandbox(ctx, uid); err != nil {
			return nodeagent.Sandbox{}, nodeagent.Errorf(nodeagent.CodeSandbox, "remove the released sandbox: %w", err)
		}
	} else {
		r.mu.Unlock()
	}
	if _, err := nodeagent.PodSysctls(pd, r.cfg.AllowedUnsafeSysctls); err != nil {
		return nodeagent.Sandbox{}, err // SysctlForbidden, as kubelet's admission
	}
	plan := PlanPod(pd)
	t := time.Now()
	if err := r.cg.EnsurePod(ctx, uid, plan.QOSClass, plan); err != nil {
		return nodeagent.Sandbox{}, nodeagent.Errorf(nodeagent.CodeSandbox, "create pod cgroup: %w", err)
	}
	r.trace(uid, "cgroup", t)
	ok := false
	defer func() {
		if !ok {
			r.removePodParts(context.WithoutCancel(ctx), uid, plan.QOSClass, nil)
		}
	}()
	t = time.Now()
	nctx := ctx
	if r.cfg.Trace != nil {
		nctx = network.WithPhases(ctx, func(phase string, d time.Duration) { r.cfg.Trace(uid, "network-"+phase, d) })
	}
	att, err := r.podNetwork(nctx, pd)
	if err != nil {
		return nodeagent.Sandbox{}, agentError(err) // FailedCreatePodSandBox
	}
	r.trace(uid, "network", t)
	dir := r.podDir(uid)
	for _, d := range []string{"volumes", "containers", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nodeagent.Sandbox{}, nodeagent.Errorf(nodeagent.CodeSandbox, "pod directory: %w", err)
		}
	}
	hostname, domain, err := podHostname(pd, r.clusterDomain())
	if err != nil {
		return nodeagent.Sandbox{}, nodeagent.Errorf(nodeagent.CodeSandbox, "%w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts"), hostsFile(pd, att.IP, hostname, domain), 0o644); err != nil {
		return nodeagent.Sandbox{}, nodeagent.Errorf(nodeagent.CodeSandbox, "hosts file: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), r.resolvFile(pd), 0o644); err != nil {
		return nodeagent.Sandbox{}, nodeagent.Errorf(nodeagent.CodeSandbox, "resolv.conf: %w", err)
	}
	pidns, err := r.sharedPIDNamespace(ctx, pd, plan.QOSClass, dir)
	if err != nil {
		return nodeagent.Sandbox{}, nodeagent.Errorf(nodeagent.CodeSandbox, "shared PID namespace: %w", err)
	}
	p := r.newPod(dir, podRecord{UID: uid, Namespace: md.GetNamespace(), Name: md.GetName(), QOS: plan.QOSClass,
		SandboxID: newID(), Net: att, CreatedAt: time.Now(), PIDNamespace: pidns})
	if err := r.savePod(p); err != nil {
		if pidns != nil {
			_ = pidns.Kill(context.WithoutCancel(ctx))
		}
		return nodeagent.Sandbox{}, nodeagent.Errorf(nodeagent.CodeSandbox, "record sandbox: %w", err)
	}
	r.mu.Lock()
	r.pods[uid] = p
	r.mu.Unlock()
	ok = true
	return nodeagent.Sandbox{ID: p.rec.SandboxID, IP: att.IP}, nil
}

func (r *Runtime) pod(uid string) *pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pods[uid]
}

// StopPodSandbox implements nodeagent.Runtime: every container still
// running is killed (SIGKILL) and waited for.
func (r *Runtime) StopPodSandbox(ctx context.Context, podUID string) error {
	p := r.pod(podUID)
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StopTimeout)
	defer cancel()
	r.mu.Lock()
	var running []*ctr
	for _, c := range p.ctrs {
		c.claimed = true
		running = append(running, c)
	}
	r.mu.Unlock()
	for _, c := range running {
		if err := c.c.Signal(unix.SIGKILL); err != nil && !errors.Is(err, container.ErrNotRunning) {
			return fmt.Errorf("kill container %q: %w", c.meta.ID, err)
		}
	}
	for _, c := range running {
		if _, err := c.c.Wait(ctx); err != nil && !errors.Is(err, container.ErrClosed) {
			return fmt.Errorf("wait for container %q: %w", c.meta.ID, err)
		}
	}
	if ns := p.rec.PIDNamespace; ns != nil { // as containerd stops the pause container
		if err := ns.Kill(ctx); err != nil {
			return err
		}
	}
	return nil
}

// RemovePodSandbox implements nodeagent.Runtime: it kills what runs, then
// removes the cgroups, the volume mounts, the network (namespace, veth,
// IP) and the pod's directory. Idempotent.
func (r *Runtime) RemovePodSandbox(ctx context.Context, podUID string) error {
	if err := r.StopPodSandbox(ctx, podUID); err != nil {
		return err
	}
	p := r.pod(podUID)
	if p == nil {
		return nil
	}
	for _, c := range p.ctrs {
		c.c.Close()
		if err := r.releaseDeviceCgroup(c.meta.ID); err != nil {
			r.log.Warn("remove the container's device cgroup", "pod", podUID, "container", c.meta.Name, "err", err)
		}
	}
	if err := r.removePodParts(ctx, podUID, p.rec.QOS, p.rec.Mounts); err != nil {
		return err
	}
	r.mu.Lock()
	p.removing = true
	r.mu.Unlock()
	if err := os.RemoveAll(p.dir); err != nil {
		return fmt.Errorf("remove pod directory: %w", err)
	}
	r.mu.Lock()
	delete(r.pods, podUID)
	r.mu.Unlock()
	close(p.removed)
	return nil
}

var _ nodeagent.SandboxReleaser = (*Runtime)(nil)

// ReleasePodSandbox implements nodeagent.SandboxReleaser: it kills what
// runs, then removes the volume mounts, cgroups and network (namespace,
// veth, IP) as RemovePodSandbox does, and deletes the volumes and the
// containers' writable layers; the pod's record, its containers' records
// and their logs remain until RemovePodSandbox. Idempotent.
func (r *Runtime) ReleasePodSandbox(ctx context.Context, podUID string) error {
	if err := r.StopPodSandbox(ctx, podUID); err != nil {
		return err
	}
	p := r.pod(podUID)
	if p == nil {
		return nil
	}
	r.mu.Lock()
	rec := p.rec
	ids := slices.Collect(maps.Keys(p.ctrs))
	r.mu.Unlock()
	if rec.Released {
		return nil
	}
	if err := r.removePodParts(ctx, podUID, rec.QOS, rec.Mounts); err != nil {
		return err
	}
	var errs []error
	errs = append(errs, os.RemoveAll(filepath.Join(p.dir, "volumes")))
	for _, id := range ids {
		for _, d := range []string{"rootfs", "upper", "work"} {
			errs = append(errs, os.RemoveAll(filepath.Join(ctrDir(p, string(id)), d)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release pod directory: %w", err)
	}
	r.mu.Lock()
	p.rec.Released, p.rec.Mounts, p.rec.VolumesReady, p.rec.PIDNamespace = true, nil, false, nil
	p.rec.Net = network.Attachment{}
	err := r.savePod(p)
	r.mu.Unlock()
	return err
}

// removePodParts removes what the kernel holds for a pod: mounts, cgroups,
// network. Idempotent.
func (r *Runtime) removePodParts(ctx context.Context, uid, qos string, mounts []string) error {
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %q: %w", m, err))
		}
	}
	if err := r.cg.RemovePod(ctx, uid, qos); err != nil {
		errs = append(errs, err)
	}
	if err := r.net.Teardown(ctx, uid); err != nil {
		errs = append(errs, agentError(err))
	}
	return errors.Join(errs...)
}

// ContainerExits implements nodeagent.Runtime.
func (r *Runtime) ContainerExits(podUID string) <-chan nodeagent.ContainerExit {
	if p := r.pod(podUID); p != nil {
		return p.exits
	}
	return nil
}

// NotifyExits implements nodeagent.Runtime.
func (r *Runtime) NotifyExits(podUID string, notify func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pods[podUID]; p != nil {
		p.notify = notify
	}
}

// ListSandboxes implements nodeagent.Runtime.
func (r *Runtime) ListSandboxes(ctx context.Context) ([]nodeagent.SandboxInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]nodeagent.SandboxInfo, 0, len(r.pods))
	for _, p := range r.pods {
		out = append(out, nodeagent.SandboxInfo{PodUID: p.rec.UID, Namespace: p.rec.Namespace, Name: p.rec.Name,
			Sandbox:      nodeagent.Sandbox{ID: p.rec.SandboxID, IP: p.rec.Net.IP},
			VolumesReady: p.rec.VolumesReady, CreatedAt: p.rec.CreatedAt, Released: p.rec.Released})
	}
	return out, ctx.Err()
}

// ListContainers implements nodeagent.Runtime. A container that exited
// before this runtime found it is reported with its Exit; one that exits
// later is delivered on ContainerExits.
func (r *Runtime) ListContainers(ctx context.Context, podUID string) ([]nodeagent.ContainerInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pods[podUID]
	if p == nil {
		return nil, ctx.Err()
	}
	out := make([]nodeagent.ContainerInfo, 0, len(p.ctrs))
	for _, c := range p.ctrs {
		st := c.c.State()
		info := nodeagent.ContainerInfo{ID: nodeagent.ContainerID(c.meta.ID), PodUID: podUID, Name: c.meta.Name,
			Image: c.meta.Image, ImageID: c.meta.ImageID, Init: c.meta.Init, RestartCount: c.meta.RestartCount,
			Running: !c.known, StartedAt: st.StartedAt}
		if c.known {
			ex := r.exitOf(c)
			info.Exit = &ex
		}
		out = append(out, info)
	}
	return out, ctx.Err()
}

// Capacity implements nodeagent.Runtime: the machine's CPUs and memory,
// the data directory's filesystem and Config.MaxPods, unless
// Config.Capacity overrides them.
func (r *Runtime) Capacity() map[string]string {
	out := map[string]string{"cpu": strconv.Itoa(runtime.NumCPU()), "pods": strconv.Itoa(r.cfg.MaxPods)}
	if kib := memTotalKiB(); kib > 0 {
		out["memory"] = strconv.FormatInt(kib, 10) + "Ki"
	}
	var st unix.Statfs_t
	if unix.Statfs(r.cfg.DataDir, &st) == nil {
		out["ephemeral-storage"] = strconv.FormatUint(st.Blocks*uint64(st.Bsize)/1024, 10) + "Ki"
	}
	maps.Copy(out, r.cfg.Capacity)
	return out
}

func memTotalKiB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(io.LimitReader(f, 1<<16))
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

var _ nodeagent.ImageLister = (*Runtime)(nil)

// NodeImages lists the images present on the node, for Node.status.images.
func (r *Runtime) NodeImages() []*corev1.ContainerImage { return r.images.Images() }

var _ nodeagent.RuntimeVersioner = (*Runtime)(nil)

// RuntimeVersion names the runtime in Node.status.nodeInfo.
func (r *Runtime) RuntimeVersion() string { return "podflow://" + nodeagent.Version() }

package linux

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/cgroups"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/nodeagent/linux/image"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// PullImage implements nodeagent.Runtime with the node's image store.
func (r *Runtime) PullImage(ctx context.Context, pod *corev1.Pod, ref, policy string) (nodeagent.ImageRef, error) {
	return r.PullImageWithSecrets(ctx, pod, ref, policy, nil) // anonymously
}

// PullImageWithSecrets implements nodeagent.SecretPuller: PullImage with
// the credentials of the pod's imagePullSecrets (image.KeyringFromSecrets);
// a Secret whose docker config does not parse fails the pull, ErrImagePull.
func (r *Runtime) PullImageWithSecrets(ctx context.Context, _ *corev1.Pod, ref, policy string, secrets []*corev1.Secret) (nodeagent.ImageRef, error) {
	k, err := image.KeyringFromSecrets(secrets)
	if err != nil {
		return nodeagent.ImageRef{}, nodeagent.Errorf(nodeagent.CodeImagePull, "%w", err)
	}
	p, err := r.images.Pull(ctx, ref, policy, image.WithKeyring(k))
	if err != nil {
		return nodeagent.ImageRef{}, agentError(err) // ErrImagePull or ErrImageNeverPull
	}
	return nodeagent.ImageRef{ID: p.ID, SizeBytes: p.SizeBytes, AlreadyPresent: p.AlreadyPresent}, nil
}

var _ nodeagent.SecretPuller = (*Runtime)(nil)

// imageRootfs returns the image's unpacked root filesystem, shared
// read-only by its containers (each gets an overlay with its own writable
// layer), unpacking it on first use.
func (r *Runtime) imageRootfs(ctx context.Context, ref, imageID string) (string, error) {
	sum := sha256.Sum256([]byte(imageID))
	dest := filepath.Join(r.cfg.DataDir, "rootfs", hex.EncodeToString(sum[:12]))
	r.mu.Lock()
	l, ok := r.unpacking[dest]
	if !ok {
		l = &sync.Mutex{}
		r.unpacking[dest] = l
	}
	r.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
		return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "rootfs directory: %w", err)
	}
	if err := r.images.Rootfs(ctx, ref, dest); err != nil {
		return "", agentError(err) // CreateContainerError
	}
	return dest, nil
}

func isInit(pd *corev1.Pod, name string) bool {
	for _, ic := range pd.GetSpec().GetInitContainers() {
		if ic.GetName() == name {
			return true
		}
	}
	return false
}

// StartContainer implements nodeagent.Runtime: a fresh rootfs from the
// image, a fresh cgroup for the container, and its process started by a
// shim in the pod's network namespace.
func (r *Runtime) StartContainer(ctx context.Context, pd *corev1.Pod, c *corev1.Container, sb nodeagent.Sandbox) (nodeagent.ContainerID, error) {
	return r.startContainer(ctx, pd, c, sb, "")
}

// StartEphemeralContainer implements nodeagent.EphemeralStarter: a
// container started as StartContainer starts one (the pod's network
// namespace, a cgroup of the pod's), with no resources of its own; with a
// target, its init joins the PID namespace of that running instance's
// init (through a pidfd checked against its start time, so a reused PID
// is never joined), as containerd's NamespaceMode TARGET: it sees the
// target's processes, and ends with it. A pod sharing one PID namespace
// (shareProcessNamespace) or the host's keeps it.
func (r *Runtime) StartEphemeralContainer(ctx context.Context, pd *corev1.Pod, c *corev1.Container, sb nodeagent.Sandbox, target nodeagent.ContainerID) (nodeagent.ContainerID, error) {
	return r.startContainer(ctx, pd, c, sb, target)
}

var _ nodeagent.EphemeralStarter = (*Runtime)(nil)

// targetPIDNamespace is the PID namespace of the pod's running container
// instance target, for an ephemeral container.
func (r *Runtime) targetPIDNamespace(p *pod, target nodeagent.ContainerID) (*container.PIDNamespace, error) {
	r.mu.Lock()
	tc := p.ctrs[target]
	r.mu.Unlock()
	if tc == nil {
		return nil, nodeagent.Errorf(nodeagent.CodeCreateContainer, "target container %q not found", target)
	}
	st := tc.c.State()
	select {
	case <-tc.c.Done():
		return nil, nodeagent.Errorf(nodeagent.CodeCreateContainer, "target container %q (%s) is not running", tc.meta.Name, target)
	default:
	}
	if st.PID <= 0 {
		return nil, nodeagent.Errorf(nodeagent.CodeCreateContainer, "target container %q (%s) has no process", tc.meta.Name, target)
	}
	return &container.PIDNamespace{PID: st.PID, Start: st.PIDStart}, nil
}

func (r *Runtime) startContainer(ctx context.Context, pd *corev1.Pod, c *corev1.Container, sb nodeagent.Sandbox, target nodeagent.ContainerID) (nodeagent.ContainerID, error) {
	uid := pd.GetMetadata().GetUid()
	p := r.pod(uid)
	if p == nil || p.rec.SandboxID != sb.ID {
		return "", nodeagent.Errorf(nodeagent.CodeRunContainer, "pod %q has no sandbox %q", uid, sb.ID)
	}
	img, err := r.images.Image(c.GetImage())
	if err != nil {
		return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "image %q: %w", c.GetImage(), err)
	}
	id := newID()
	dir := ctrDir(p, id)
	rootfs := filepath.Join(dir, "rootfs")
	t := time.Now()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "container directory: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	lower, err := r.imageRootfs(ctx, c.GetImage(), img.ID)
	if err != nil {
		return "", err // CodeCreateContainer
	}
	r.trace(uid, "rootfs", t)

	t = time.Now()
	plan, _ := PlanPod(pd).Container(c.GetName())
	if old, err := r.cg.LoadContainer(uid, p.rec.QOS, c.GetName()); err == nil {
		// A fresh cgroup per instance: OOM counters start from zero.
		if err := deleteCgroup(ctx, old); err != nil {
			return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "remove the cgroup of the previous instance: %w", err)
		}
	}
	cg, err := r.cg.EnsureContainer(ctx, uid, p.rec.QOS, c.GetName(), plan)
	if err != nil {
		return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "container cgroup: %w", err)
	}
	r.trace(uid, "cgroup-container", t)

	hostname, _, err := podHostname(pd, r.clusterDomain())
	if err != nil {
		return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "%w", err)
	}
	if pd.GetSpec().GetHostNetwork() { // the node's UTS namespace, and its name
		hostname, _ = os.Hostname()
	}
	env := containerEnv(c, img.Config, hostname)
	args := containerArgs(c, img.Config)
	if len(args) == 0 {
		return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "no command specified for container %q", c.GetName())
	}
	wd := c.GetWorkingDir()
	if wd == "" {
		wd = img.Config.WorkingDir
	}
	mounts, err := r.containerMounts(pd, c, p)
	if err != nil {
		return "", err
	}
	tm, err := terminationMount(dir, nodeagent.TerminationMessagePath(c))
	if err != nil {
		return "", err
	}
	mounts = append(mounts, tm)
	sec, err := containerSecurity(pd, c, img.Config.User, seccompOptions{defaultRuntime: r.cfg.SeccompDefault, root: r.cfg.SeccompProfileRoot,
		selinux: seLinuxEnabled()})
	if err != nil {
		return "", err
	}
	for _, m := range mounts {
		if m.Volume {
			if err := relabelVolume(m.Source, sec.MountLabel); err != nil {
				return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "%w", err)
			}
		}
	}
	sysctls, err := nodeagent.PodSysctls(pd, r.cfg.AllowedUnsafeSysctls)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	restarts := p.rec.Starts[c.GetName()]
	r.mu.Unlock()
	lp := logPath(p, c.GetName(), restarts)
	if err := os.MkdirAll(filepath.Dir(lp), 0o700); err != nil {
		return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "log directory: %w", err)
	}
	meta := ctrMeta{ID: id, Name: c.GetName(), Image: c.GetImage(), ImageID: img.ID, Init: isInit(pd, c.GetName()),
		RestartCount: restarts, CreatedAt: time.Now(), Env: env, WorkingDir: wd}
	if err := container.WriteJSON(filepath.Join(dir, "meta.json"), meta); err != nil {
		return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "record container: %w", err)
	}
	spec := container.Spec{ID: id, Dir: dir, Rootfs: rootfs, Image: lower, LogPath: lp, Hostname: hostname,
		Args: args, Env: env, WorkingDir: wd, Mounts: mounts, NetnsPath: p.rec.Net.NetnsPath, Cgroups: cg.Paths(), Security: sec,
		LogMaxSize: r.cfg.ContainerLogMaxSize, LogMaxFiles: r.cfg.ContainerLogMaxFiles,
		Stdin: c.GetStdin(), StdinOnce: c.GetStdinOnce(), TTY: c.GetTty()}
	withPodNamespaces(&spec, pd, sysctls, p.rec.PIDNamespace)
	if target != "" && spec.PIDNamespace == nil && !spec.HostPID {
		if spec.PIDNamespace, err = r.targetPIDNamespace(p, target); err != nil {
			return "", err
		}
	}
	t = time.Now()
	r.mu.Lock()
	r.starting[id] = true // until registered below, or failed
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.starting, id)
		r.mu.Unlock()
	}()
	if err := r.noteDeviceCgroup(id); err != nil {
		return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "%w", err)
	}
	var h *container.Container
	if r.spares != nil {
		h, err = r.spares.Start(ctx, spec)
	} else {
		h, err = container.Start(ctx, r.cfg.Container, spec)
	}
	if err != nil {
		if rerr := r.releaseDeviceCgroup(id); rerr != nil {
			r.log.Warn("device cgroup left for the next sweep", "pod", uid, "err", rerr)
		}
		code := nodeagent.CodeCreateContainer
		if errors.Is(err, container.ErrExec) {
			code = nodeagent.CodeRunContainer
		}
		return "", nodeagent.Errorf(code, "start container %q: %w", c.GetName(), err)
	}
	r.trace(uid, "start", t)
	ok = true
	r.mu.Lock()
	p.rec.Starts[c.GetName()] = restarts + 1
	stale := r.staleLocked(p, c.GetName())
	r.addCtr(p, &ctr{meta: meta, c: h})
	err = r.savePod(p)
	r.mu.Unlock()
	if err != nil {
		r.log.Warn("record container start", "pod", uid, "err", err)
	}
	for _, s := range stale { // with its logs, as kubelet's container GC
		s.c.Close()
		if err := r.releaseDeviceCgroup(s.meta.ID); err != nil {
			r.log.Warn("device cgroup left for the next sweep", "pod", uid, "err", err)
		}
		_ = os.RemoveAll(ctrDir(p, s.meta.ID))
		removeLog(logPath(p, s.meta.Name, s.meta.RestartCount))
	}
	return nodeagent.ContainerID(id), nil
}

// staleLocked unregisters the exited instances of name older than the most
// recent one (kept, as kubelet does, for its logs and exit) and returns
// them for removal.
func (r *Runtime) staleLocked(p *pod, name string) []*ctr {
	var dead []*ctr
	for _, c := range p.ctrs {
		if c.meta.Name != name {
			continue
		}
		select {
		case <-c.c.Done():
			dead = append(dead, c)
		default:
		}
	}
	sort.Slice(dead, func(i, j int) bool { return dead[i].meta.CreatedAt.After(dead[j].meta.CreatedAt) })
	if len(dead) <= 1 {
		return nil
	}
	for _, c := range dead[1:] {
		delete(p.ctrs, nodeagent.ContainerID(c.meta.ID))
	}
	return dead[1:]
}

// removeLog removes a container instance's log and its rotated files.
func removeLog(path string) {
	rotated, _ := container.RotatedLogs(path)
	for _, f := range append(rotated, path) {
		_ = os.Remove(f)
	}
}

// deleteCgroup removes an exited container's cgroup, waiting briefly for
// the kernel to finish reaping its processes.
func deleteCgroup(ctx context.Context, cg cgroups.Container) error {
	for {
		err := cg.Delete()
		if !errors.Is(err, cgroups.ErrBusy) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// containerEnv is the image's environment, PATH when the image sets none,
// HOSTNAME, the pod's hostname (as containerd's CRI sets it), then the
// container's variables over them. The agent resolved and expanded those
// (see nodeagent.Runtime.StartContainer); nothing is expanded here.
func containerEnv(c *corev1.Container, ic image.ImageConfig, hostname string) []string {
	var order []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, kv := range ic.Env {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	if _, ok := vals["PATH"]; !ok {
		set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	set("HOSTNAME", hostname)
	for _, e := range c.GetEnv() {
		set(e.GetName(), e.GetValue())
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out
}

// containerArgs merges the container's command and args with the image's
// Entrypoint and Cmd by Kubernetes' rules: command replaces Entrypoint (and
// drops Cmd), args replace Cmd. The agent expanded command and args.
func containerArgs(c *corev1.Container, ic image.ImageConfig) []string {
	var argv []string
	switch {
	case len(c.GetCommand()) > 0:
		argv = append(append(argv, c.GetCommand()...), c.GetArgs()...)
	case len(c.GetArgs()) > 0:
		argv = append(append(argv, ic.Entrypoint...), c.GetArgs()...)
	default:
		argv = append(append(argv, ic.Entrypoint...), ic.Cmd...)
	}
	return argv
}

// StopContainer implements nodeagent.Runtime.
func (r *Runtime) StopContainer(ctx context.Context, id nodeagent.ContainerID, grace time.Duration) (nodeagent.ContainerExit, error) {
	r.mu.Lock()
	var c *ctr
	for _, p := range r.pods {
		if c = p.ctrs[id]; c != nil {
			break
		}
	}
	if c == nil {
		r.mu.Unlock()
		return nodeagent.ContainerExit{}, nodeagent.Errorf(nodeagent.CodeNotFound, "no container %q", id)
	}
	c.claimed = true
	r.mu.Unlock()
	if _, err := c.c.Stop(ctx, grace); err != nil {
		return nodeagent.ContainerExit{}, fmt.Errorf("stop container %q: %w", id, err)
	}
	return r.exitOf(c), nil
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Programs. A simulated container runs no process, but the runtime can be
// given a Programs: for each container it may return a Program, which
// the runtime then runs in place of the container's process (a built-in
// shell that understands `echo hi`, `sleep 5` or an interactive `sh`).
// What it writes is the container's log; when it returns, the container
// exits with its code; stopping the container cancels it. A container
// with stdin (kubectl run -i, debug -it) gives it a stdin that kubectl
// attach writes to. A container without a Program runs until stopped, as
// without Programs. The exit-after annotations win over a Program.

// Program is what a simulated container runs. It returns the exit code
// once done, or when ctx ends (the container stopped).
type Program func(ctx context.Context, io ProgramIO) int

// ProgramIO is a Program's standard streams: Stdin is nil when the
// container has none (kubelet gives it /dev/null).
type ProgramIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
}

// Programs chooses what a container runs.
type Programs interface {
	// Program returns what container c of pod runs, or nil when the
	// runtime is to simulate no process for it. ip is the pod's IP and
	// volumes its volumes' files by name (what MountVolumes got).
	Program(pod *corev1.Pod, c *corev1.Container, ip string, volumes map[string]map[string][]byte) Program
}

// startProgram runs prog for instance c of pod p: its output goes to c's
// log; its end is the container's natural exit. Called with r.mu held.
func (r *Runtime) startProgramLocked(p *simPod, c *simCtr, spec *corev1.Container, prog Program) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	pio := ProgramIO{Stdout: r.logWriter(c, "stdout"), Stderr: r.logWriter(c, "stderr"), TTY: spec.GetTty()}
	if spec.GetTty() {
		pio.Stderr = pio.Stdout // a terminal carries both
	}
	if spec.GetStdin() {
		pr, pw := io.Pipe()
		pio.Stdin, c.stdin, c.stdinOnce = pr, pw, spec.GetStdinOnce()
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		code := prog(ctx, pio)
		if c.stdin != nil {
			_ = c.stdin.CloseWithError(io.ErrClosedPipe)
		}
		if ctx.Err() == nil {
			r.naturalExit(p, c, int32(code))
		}
	}()
}

// volumeFilesLocked is a copy of the files of p's volumes.
func volumeFilesLocked(p *simPod) map[string]map[string][]byte {
	out := make(map[string]map[string][]byte, len(p.volumes))
	for i := range p.volumes {
		out[p.volumes[i].name] = p.volumes[i].fileMap()
	}
	return out
}

// Stdio is an attach session's streams (kubectl attach): Stdin is nil
// without -i.
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
}

// ErrNoContainer is returned by Attach for a pod or container that does
// not run on this node.
var ErrNoContainer = errors.New("sim: no such running container")

// Attach connects a session to a running container (kubectl attach, run
// -i, debug -it): what the container writes from now on goes to st's
// Stdout and Stderr, and, when the container has a stdin, what st.Stdin
// reads goes to it (closed when the session ends, for a container with
// stdinOnce). It returns when the container exits or ctx ends.
func (r *Runtime) Attach(ctx context.Context, namespace, pod, uid, container string, st Stdio) error {
	r.mu.Lock()
	var c *simCtr
	for _, p := range r.pods {
		md := p.pod.GetMetadata()
		if md.GetNamespace() != namespace || md.GetName() != pod || (uid != "" && md.GetUid() != uid) {
			continue
		}
		for _, x := range p.containers {
			if x.info.Running && (x.info.Name == container || container == "" && !x.info.Init) {
				c = x
			}
		}
	}
	r.mu.Unlock()
	if c == nil {
		return fmt.Errorf("%w: container %q of pod %s/%s", ErrNoContainer, container, namespace, pod)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The output is followed from here, before stdin is connected: what
	// the program answers to the session's first input is not missed.
	r.mu.Lock()
	off := c.log.end()
	r.mu.Unlock()
	if st.Stdin != nil && c.stdin != nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			copyCtx(ctx, c.stdin, st.Stdin)
			if c.stdinOnce {
				_ = c.stdin.Close() // stdinOnce: the first session's end is stdin's
			}
		}()
	}
	err := r.followLog(ctx, c, off, st.Stdout, st.Stderr, st.TTY)
	if errors.Is(err, context.Canceled) {
		return nil // the client left
	}
	return err
}

// copyCtx copies src to dst until src ends, a write fails or ctx ends.
func copyCtx(ctx context.Context, dst io.Writer, src io.Reader) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(dst, src)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

var _ nodeagent.Runtime = (*Runtime)(nil)

// RunningContainer is a running container as the runtime knows it.
type RunningContainer struct {
	Pod  *corev1.Pod
	Spec *corev1.Container // as the agent resolved it (env, command)
	ID   nodeagent.ContainerID
	IP   string
	// Volumes are the files of the pod's volumes by volume name.
	Volumes map[string]map[string][]byte
}

// Running returns a running container of a pod (by namespace, name and,
// when set, uid): the named one, or with container "" the first app
// container running.
func (r *Runtime) Running(namespace, pod, uid, container string) (RunningContainer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pods {
		md := p.pod.GetMetadata()
		if md.GetNamespace() != namespace || md.GetName() != pod || (uid != "" && md.GetUid() != uid) {
			continue
		}
		var best *simCtr
		for _, c := range p.containers {
			if !c.info.Running || !(c.info.Name == container || container == "" && !c.info.Init) {
				continue
			}
			if best == nil || c.info.StartedAt.Before(best.info.StartedAt) {
				best = c
			}
		}
		if best != nil {
			return RunningContainer{Pod: p.pod, Spec: best.spec, ID: best.info.ID, IP: p.sb.IP, Volumes: volumeFilesLocked(p)}, true
		}
	}
	return RunningContainer{}, false
}

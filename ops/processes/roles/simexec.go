package roles

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/services/nodeexec"
)

// simExec answers a simulated cluster's exec sessions with a few
// builtins, enough to try kubectl exec and cp on simulated pods: echo, cat
// (stdin to stdout), hostname (the pod's name), env, true, false, and tar
// and test over each container's in-memory files (simFS); any other
// command is not found (127). Attach and every forwarded port echo. Only
// running containers of pods on the cluster's nodes exec.
type simExec struct {
	cl *sim.Cluster
	fs *simFS
}

func newSimExec(cl *sim.Cluster) *simExec { return &simExec{cl: cl, fs: newSimFS(simFSMaxBytes)} }

var _ nodeexec.Executor = (*simExec)(nil)

// simGonePoll is how often a session checks that its container still runs.
const simGonePoll = 500 * time.Millisecond

func (e *simExec) Exec(ctx context.Context, req nodeexec.Request, st nodeexec.Streams) error {
	key, err := e.running(ctx, req)
	if err != nil {
		return err
	}
	// The session ends when its container does (the pod deleted).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTicker(simGonePoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := e.running(ctx, req); err != nil && ctx.Err() == nil {
					cancel(err)
					return
				}
			}
		}
	}()
	return e.builtin(ctx, key, req, st)
}

// builtin runs req in the container key names.
func (e *simExec) builtin(ctx context.Context, key simFSKey, req nodeexec.Request, st nodeexec.Streams) error {
	out, errw := st.Stdout, st.Stderr
	if out == nil {
		out = io.Discard
	}
	if errw == nil {
		errw = out // a terminal's output carries both
	}
	if req.Port > 0 || req.Attach { // a simulated port or stdio echoes what it is sent
		if st.Stdin == nil {
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return copyUntil(ctx, out, st.Stdin)
	}
	switch req.Command[0] {
	case "echo":
		_, err := fmt.Fprintln(out, strings.Join(req.Command[1:], " "))
		return err
	case "cat":
		if st.Stdin == nil {
			return nil
		}
		return copyUntil(ctx, out, st.Stdin)
	case "hostname":
		_, err := fmt.Fprintln(out, req.Pod)
		return err
	case "env":
		_, err := fmt.Fprintf(out, "HOSTNAME=%s\nPODFLOW_NODE=%s\n", req.Pod, req.Node)
		return err
	case "true":
		return nil
	case "false":
		return &nodeexec.ExitError{Code: 1}
	case "test":
		return e.fs.simTest(key, req.Command[1:])
	case "tar":
		return e.fs.simTar(key, req.Command[1:], st.Stdin, out, errw)
	}
	fmt.Fprintf(errw, "sim: %s: command not found\n", req.Command[0])
	return &nodeexec.ExitError{Code: 127}
}

// running checks that req's container runs on req's node of the cluster
// and names it; the files of containers of pods gone from the node go.
func (e *simExec) running(ctx context.Context, req nodeexec.Request) (simFSKey, error) {
	rt, ok := e.cl.Runtime(req.Node)
	if !ok {
		return simFSKey{}, fmt.Errorf("%w: no simulated node %q", nodeexec.ErrNotFound, req.Node)
	}
	sbs, err := rt.ListSandboxes(ctx)
	if err != nil {
		return simFSKey{}, err
	}
	live := make(map[string]bool, len(sbs))
	for _, sb := range sbs {
		live[sb.PodUID] = true
	}
	e.fs.prune(req.Node, live)
	for _, sb := range sbs {
		if sb.Namespace != req.Namespace || sb.Name != req.Pod || (req.UID != "" && sb.PodUID != req.UID) {
			continue
		}
		cs, err := rt.ListContainers(ctx, sb.PodUID)
		if err != nil {
			return simFSKey{}, err
		}
		for _, c := range cs {
			if c.Running && (c.Name == req.Container || req.Container == "" && !c.Init) {
				return simFSKey{node: req.Node, podUID: sb.PodUID, container: c.Name}, nil
			}
		}
	}
	return simFSKey{}, fmt.Errorf("%w: container %q of pod %s/%s does not run on node %q", nodeexec.ErrNotFound, req.Container, req.Namespace, req.Pod, req.Node)
}

// copyUntil copies r to w until r ends or ctx does (then ctx's cause); the
// copy goroutine returns when r's Read does (the session closes it).
func copyUntil(ctx context.Context, w io.Writer, r io.Reader) error {
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, r)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

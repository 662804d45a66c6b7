package roles

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/services/nodeexec"
)

// simExec answers a simulated cluster's exec sessions with a few
// builtins, enough to try kubectl exec on simulated pods: echo, cat (stdin
// to stdout), hostname (the pod's name), env, true, false; any other
// command is not found (127). Attach and every forwarded port echo. Only running containers of pods on the
// cluster's nodes exec.
type simExec struct{ cl *sim.Cluster }

var _ nodeexec.Executor = simExec{}

func (e simExec) Exec(ctx context.Context, req nodeexec.Request, st nodeexec.Streams) error {
	if err := e.running(ctx, req); err != nil {
		return err
	}
	out, errw := st.Stdout, st.Stderr
	if out == nil {
		out = io.Discard
	}
	if errw == nil {
		errw = out // a terminal's output carries both
	}
	if req.Port > 0 { // a simulated port echoes what it is sent
		if st.Stdin != nil {
			_, err := io.Copy(out, st.Stdin)
			return err
		}
		return nil
	}
	if req.Attach { // a simulated container's stdio: what it is sent comes back
		if st.Stdin != nil {
			_, err := io.Copy(out, st.Stdin)
			return err
		}
		<-ctx.Done()
		return nil
	}
	switch req.Command[0] {
	case "echo":
		_, err := fmt.Fprintln(out, strings.Join(req.Command[1:], " "))
		return err
	case "cat":
		if st.Stdin == nil {
			return nil
		}
		_, err := io.Copy(out, st.Stdin)
		return err
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
	}
	fmt.Fprintf(errw, "sim: %s: command not found\n", req.Command[0])
	return &nodeexec.ExitError{Code: 127}
}

// running checks that req's container runs on req's node of the cluster.
func (e simExec) running(ctx context.Context, req nodeexec.Request) error {
	rt, ok := e.cl.Runtime(req.Node)
	if !ok {
		return fmt.Errorf("%w: no simulated node %q", nodeexec.ErrNotFound, req.Node)
	}
	sbs, err := rt.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		if sb.Namespace != req.Namespace || sb.Name != req.Pod || (req.UID != "" && sb.PodUID != req.UID) {
			continue
		}
		cs, err := rt.ListContainers(ctx, sb.PodUID)
		if err != nil {
			return err
		}
		for _, c := range cs {
			if c.Running && (c.Name == req.Container || req.Container == "" && !c.Init) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: container %q of pod %s/%s does not run on node %q", nodeexec.ErrNotFound, req.Container, req.Namespace, req.Pod, req.Node)
}

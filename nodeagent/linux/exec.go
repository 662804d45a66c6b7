package linux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/podflow/podflow/nodeagent/linux/container"
)

// ErrNoContainer is returned by ExecIn when the pod or its container is
// not running on this node.
var ErrNoContainer = errors.New("linux: no such running container on this node")

// ExecTarget names the container of an exec (kubectl exec): the pod by
// namespace and name (and UID, when set) and the container by name ("":
// the pod's only app container).
type ExecTarget struct {
	Namespace, Pod, UID, Container string
}

// ExecIn runs args in a running container of a pod of this node, with the
// container's environment and working directory, streaming stdio (see
// container.ExecStdio), and returns its exit code.
func (r *Runtime) ExecIn(ctx context.Context, t ExecTarget, args []string, stdio container.Stdio) (int, error) {
	h, err := r.runningContainer(t)
	if err != nil {
		return 0, err
	}
	return h.c.ExecStdio(ctx, args, h.meta.Env, h.meta.WorkingDir, stdio)
}

// AttachTo attaches stdio to a running container of a pod of this node
// (kubectl attach; see container.Container.Attach): it returns when the
// container exits or ctx ends, an error matching container.ErrNoAttach
// when the container's shim serves no attach.
func (r *Runtime) AttachTo(ctx context.Context, t ExecTarget, stdio container.Stdio) error {
	h, err := r.runningContainer(t)
	if err != nil {
		return err
	}
	return h.c.Attach(ctx, stdio)
}

// runningContainer finds the running instance of t's container.
func (r *Runtime) runningContainer(t ExecTarget) (*ctr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pods {
		if p.rec.Namespace != t.Namespace || p.rec.Name != t.Pod || (t.UID != "" && p.rec.UID != t.UID) {
			continue
		}
		var found []*ctr
		for _, h := range p.ctrs {
			if h.c.State().Status == container.StatusRunning && (!h.meta.Init || t.Container != "") &&
				(t.Container == "" || h.meta.Name == t.Container) {
				found = append(found, h)
			}
		}
		if len(found) == 1 {
			return found[0], nil
		}
		if len(found) > 1 {
			return nil, fmt.Errorf("pod %s/%s: %d running containers, name one: %w", t.Namespace, t.Pod, len(found), ErrNoContainer)
		}
	}
	return nil, fmt.Errorf("container %q of pod %s/%s: %w", t.Container, t.Namespace, t.Pod, ErrNoContainer)
}

// DialPod connects to port on the loopback of t's pod network namespace
// (kubectl port-forward, as the CRI's PortForward): the socket is made on
// a thread that joined the namespace and then returns from it
// (container.OnThreadIn).
func (r *Runtime) DialPod(ctx context.Context, t ExecTarget, port int32) (net.Conn, error) {
	path, err := r.podNetns(t)
	if err != nil {
		return nil, err
	}
	var c net.Conn
	err = container.OnThreadIn([]container.Namespace{{Path: path, Kind: container.NSNet}}, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", t.Namespace, t.Pod, err)
	}
	return c, nil
}

// podNetns is the network namespace of t's pod.
func (r *Runtime) podNetns(t ExecTarget) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pods {
		if p.rec.Namespace == t.Namespace && p.rec.Name == t.Pod && (t.UID == "" || p.rec.UID == t.UID) && p.rec.Net.NetnsPath != "" {
			return p.rec.Net.NetnsPath, nil
		}
	}
	return "", fmt.Errorf("pod %s/%s: %w", t.Namespace, t.Pod, ErrNoContainer)
}

package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/ops/processes/simshell"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/nodeexec"
	"github.com/podflow/podflow/services/nodelogs"
	"github.com/podflow/podflow/services/pipeline"
)

// simNode makes a simulated cluster's nodes answer the node's verbs as a
// node does, through the built-in shell of package simshell: exec runs
// the command over the container's simulated files (kubectl cp included);
// attach joins the container's program (an interactive sh with kubectl
// run -it or debug -it) or shows what it logs; a forwarded port echoes
// what it is sent; logs are the runtime's. Only running containers of
// pods on the cluster's nodes exec.
type simNode struct {
	cl *sim.Cluster
	sh *simshell.Shell
}

func newSimNode(cl *sim.Cluster, net simshell.Net) *simNode {
	return &simNode{cl: cl, sh: &simshell.Shell{FS: simshell.NewFS(simshell.DefaultMaxBytes), Net: net}}
}

var (
	_ nodeexec.Executor = (*simNode)(nil)
	_ sim.Programs      = (*simNode)(nil)
)

// simGonePoll is how often a session checks that its container still runs.
const simGonePoll = 500 * time.Millisecond

// container is what the shell sees of a running container.
func (n *simNode) container(node string, rc sim.RunningContainer) *simshell.Container {
	return shellContainer(node, rc.Pod, rc.Spec, rc.IP, rc.Volumes)
}

// shellContainer is container spec of pod on node, with its volumes'
// files under their mount paths and the files the runtime gives every
// container.
func shellContainer(node string, pod *corev1.Pod, spec *corev1.Container, ip string, vols map[string]map[string][]byte) *simshell.Container {
	md := pod.GetMetadata()
	c := &simshell.Container{
		Key:       simshell.Key{Node: node, PodUID: md.GetUid(), Container: spec.GetName()},
		Namespace: md.GetNamespace(), Pod: md.GetName(), IP: ip,
		Files: map[string][]byte{
			"/etc/hostname": []byte(md.GetName() + "\n"),
			"/etc/hosts":    fmt.Appendf(nil, "127.0.0.1\tlocalhost\n%s\t%s\n", ip, md.GetName()),
			"/etc/resolv.conf": fmt.Appendf(nil, "search %s.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
				md.GetNamespace()),
		},
	}
	for _, e := range spec.GetEnv() {
		c.Env = append(c.Env, e.GetName()+"="+e.GetValue())
	}
	for _, m := range spec.GetVolumeMounts() {
		files, ok := vols[m.GetName()]
		if !ok {
			continue
		}
		c.ReadOnly = append(c.ReadOnly, m.GetMountPath())
		for p, data := range files {
			if sub := m.GetSubPath(); sub != "" {
				rel, ok := strings.CutPrefix(p, sub)
				if !ok || rel != "" && !strings.HasPrefix(rel, "/") {
					continue
				}
				p = rel
			}
			c.Files[path.Join(m.GetMountPath(), p)] = data
		}
	}
	return c
}

// Program implements sim.Programs: what the shell can run of the
// container's command, nil for the rest.
func (n *simNode) Program(pod *corev1.Pod, c *corev1.Container, ip string, vols map[string]map[string][]byte) sim.Program {
	argv := append(append([]string{}, c.GetCommand()...), c.GetArgs()...)
	run := n.sh.Program(shellContainer(pod.GetSpec().GetNodeName(), pod, c, ip, vols), c.GetImage(), argv)
	if run == nil {
		return nil
	}
	return func(ctx context.Context, pio sim.ProgramIO) int {
		return run(ctx, simshell.IO{Stdin: pio.Stdin, Stdout: pio.Stdout, Stderr: pio.Stderr, TTY: pio.TTY})
	}
}

func (n *simNode) Exec(ctx context.Context, req nodeexec.Request, st nodeexec.Streams) error {
	rt, rc, err := n.running(ctx, req)
	if err != nil {
		return err
	}
	if req.Attach { // it ends by itself when the container exits
		err := rt.Attach(ctx, req.Namespace, req.Pod, req.UID, rc.Spec.GetName(), sim.Stdio{Stdin: st.Stdin, Stdout: st.Stdout, Stderr: st.Stderr, TTY: req.TTY})
		if errors.Is(err, sim.ErrNoContainer) {
			return fmt.Errorf("%w: %v", nodeexec.ErrNotFound, err)
		}
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
				if _, _, err := n.running(ctx, req); err != nil && ctx.Err() == nil {
					cancel(err)
					return
				}
			}
		}
	}()
	out, errw := st.Stdout, st.Stderr
	if out == nil {
		out = io.Discard
	}
	if errw == nil {
		errw = out // a terminal's output carries both
	}
	switch {
	case req.Port > 0: // a simulated port echoes what it is sent
		if st.Stdin == nil {
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return copyUntil(ctx, out, st.Stdin)
	}
	code := n.sh.Exec(ctx, n.container(req.Node, rc), req.Command, simshell.IO{Stdin: st.Stdin, Stdout: out, Stderr: errw, TTY: req.TTY})
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if code != 0 {
		return &nodeexec.ExitError{Code: code}
	}
	return nil
}

// running finds req's running container on req's node of the cluster;
// the files of containers of pods gone from the node go.
func (n *simNode) running(ctx context.Context, req nodeexec.Request) (*sim.Runtime, sim.RunningContainer, error) {
	rt, ok := n.cl.Runtime(req.Node)
	if !ok {
		return nil, sim.RunningContainer{}, fmt.Errorf("%w: no simulated node %q", nodeexec.ErrNotFound, req.Node)
	}
	sbs, err := rt.ListSandboxes(ctx)
	if err != nil {
		return nil, sim.RunningContainer{}, err
	}
	live := make(map[string]bool, len(sbs))
	for _, sb := range sbs {
		live[sb.PodUID] = true
	}
	n.sh.FS.Prune(req.Node, live)
	rc, ok := rt.Running(req.Namespace, req.Pod, req.UID, req.Container)
	if !ok {
		return nil, rc, fmt.Errorf("%w: container %q of pod %s/%s does not run on node %q", nodeexec.ErrNotFound, req.Container, req.Namespace, req.Pod, req.Node)
	}
	return rt, rc, nil
}

// serveLogs answers the log requests of every node of the cluster
// (pods/log) through each node's agent, which picks the instance from
// the pod's status as kubelet does (readLog), until the subscription
// ends.
func (n *simNode) serveLogs(ctx context.Context, nc *nats.Conn) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(pipeline.LogsPrefix+".*", func(msg *nats.Msg) {
		rep, err := n.readLog(msg)
		if err != nil {
			rep = nodelogs.Reply{Error: err.Error()}
			if e, ok := errors.AsType[*nodelogs.Error](err); ok {
				rep.Error, rep.Reason = e.Message, e.Reason
			}
		}
		b, _ := json.Marshal(rep)
		_ = msg.Respond(b)
	})
	if err != nil {
		return nil, err
	}
	return sub, bus.Subscribed(ctx, nc, sub)
}

func (n *simNode) readLog(msg *nats.Msg) (nodelogs.Reply, error) {
	node, err := bus.DecodeToken(strings.TrimPrefix(msg.Subject, pipeline.LogsPrefix+"."))
	if err != nil {
		return nodelogs.Reply{}, &nodelogs.Error{Reason: nodelogs.ReasonBadRequest, Message: err.Error()}
	}
	var req nodelogs.Request
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		return nodelogs.Reply{}, &nodelogs.Error{Reason: nodelogs.ReasonBadRequest, Message: err.Error()}
	}
	agent, ok := n.cl.Agent(node)
	if !ok {
		return nodelogs.Reply{}, &nodelogs.Error{Reason: nodelogs.ReasonNotFound, Message: fmt.Sprintf("no simulated node %q", node)}
	}
	return readLog(agent, req, nodelogs.ChunkBytes)
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

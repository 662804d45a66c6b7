package apiserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/nodeexec"
	"github.com/podflow/podflow/services/nodelogs"
	"github.com/podflow/podflow/services/podmetrics"
	"github.com/podflow/podflow/services/stage"
)

// NodeRelays relays the requests the HTTPS front door cannot answer from
// the store to the pods' nodes, over NATS: exec, attach and port-forward
// sessions (services/nodeexec), container logs (services/nodelogs) and
// resource usage (services/podmetrics).
type NodeRelays struct {
	NATS *nats.Conn
}

var (
	_ StreamBackend  = NodeRelays{}
	_ LogBackend     = NodeRelays{}
	_ MetricsBackend = NodeRelays{}
)

// PodStream relays an exec, attach or port-forward session to the pod's
// node (pods/exec, pods/attach, pods/portforward).
func (r NodeRelays) PodStream(ctx context.Context, pod *corev1.Pod, ps PodStream) error {
	md := pod.GetMetadata()
	req := nodeexec.Request{Node: pod.GetSpec().GetNodeName(), Namespace: md.GetNamespace(), Pod: md.GetName(),
		UID: md.GetUid(), Container: ps.Container, Command: ps.Command, Attach: ps.Attach, Port: ps.Port, TTY: ps.TTY}
	st := nodeexec.Streams{Stdin: ps.Stdin, Stdout: ps.Stdout, Stderr: ps.Stderr}
	if ps.Resize != nil {
		ch := make(chan nodeexec.Size, 1)
		st.Resize = ch
		ctx2, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			for {
				select {
				case <-ctx2.Done():
					return
				case sz, ok := <-ps.Resize:
					if !ok {
						return
					}
					select {
					case ch <- nodeexec.Size{Width: sz.Width, Height: sz.Height}:
					case <-ctx2.Done():
						return
					}
				}
			}
		}()
		ctx = ctx2
	}
	err := nodeexec.Run(ctx, r.NATS, nodeexec.DefaultConfig(), req, st)
	if errors.Is(err, nodeexec.ErrLost) && ctx.Err() == nil {
		return fmt.Errorf("the node %q does not answer: %w", req.Node, err)
	}
	return err
}

// PodLogs opens a container's log on the pod's node (pods/log): it is read
// from there a chunk (nodelogs.ChunkBytes) at a time as the HTTPS handler
// writes it, so the front door never holds more than one chunk of it.
func (r NodeRelays) PodLogs(ctx context.Context, pod *corev1.Pod, opts LogOptions) (LogStream, *corev1.Status) {
	name := pod.GetMetadata().GetName()
	node := pod.GetSpec().GetNodeName()
	if node == "" {
		return nil, stage.Failure(400, eventsv1.ReasonBadRequest, "pods", name, "pod %q has no node yet: no logs", name)
	}
	req := nodelogs.Request{
		Namespace: pod.GetMetadata().GetNamespace(), Pod: name, Container: opts.Container, Previous: opts.Previous,
		TailLines: opts.TailLines,
	}
	if !opts.Since.IsZero() {
		req.SinceTime = opts.Since.UnixNano()
	}
	stream, err := nodelogs.Open(ctx, r.NATS, node, req, nodelogs.Options{
		Follow: opts.Follow, Timestamps: opts.Timestamps, LimitBytes: opts.LimitBytes,
	})
	ne, refused := errors.AsType[*nodelogs.Error](err)
	switch {
	case refused && ne.Reason == nodelogs.ReasonBadRequest: // kubelet's 400, relayed as the apiserver does
		return nil, stage.Failure(400, eventsv1.ReasonBadRequest, "pods", name, "%s", ne.Message)
	case refused && ne.Reason == nodelogs.ReasonNotFound:
		return nil, stage.Failure(404, eventsv1.ReasonNotFound, "pods", name, "%s", ne.Message)
	case errors.Is(err, nodelogs.ErrNode):
		return nil, stage.Failure(404, eventsv1.ReasonNotFound, "pods", name, "%v", err)
	case err != nil:
		return nil, stage.Failure(503, "ServiceUnavailable", "pods", name,
			"the node %q does not serve logs: %v", node, err)
	}
	return stream, nil
}

// NodeReading asks node's agent for its resource usage (metrics.k8s.io).
func (r NodeRelays) NodeReading(ctx context.Context, node string) (podmetrics.Reading, error) {
	return podmetrics.Ask(ctx, r.NATS, node)
}

package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/nodeexec"
)

var _ apiserver.StreamBackend = (*Stage)(nil)

// PodStream relays an exec, attach or port-forward session to the pod's
// node (pods/exec, pods/attach, pods/portforward).
func (s *Stage) PodStream(ctx context.Context, pod *corev1.Pod, ps apiserver.PodStream) error {
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
	err := nodeexec.Run(ctx, s.env.NATS, nodeexec.DefaultConfig(), req, st)
	if errors.Is(err, nodeexec.ErrLost) && ctx.Err() == nil {
		return fmt.Errorf("the node %q does not answer (simulated nodes exec only what they simulate): %w", req.Node, err)
	}
	return err
}

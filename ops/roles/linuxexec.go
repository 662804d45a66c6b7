package roles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/services/nodeexec"
)

// linuxExec runs a Linux node's exec and port-forward sessions (kubectl
// exec, port-forward) in its runtime's containers and pod network
// namespaces: only pods of this node, which the runtime alone knows.
type linuxExec struct{ rt *linux.Runtime }

var _ nodeexec.Executor = linuxExec{}

// ErrAttach: attach is not served by the Linux runtime yet.
var ErrAttach = errors.New("roles: attach is not supported by the Linux runtime")

func (e linuxExec) Exec(ctx context.Context, req nodeexec.Request, st nodeexec.Streams) error {
	if req.Attach {
		return ErrAttach
	}
	t := linux.ExecTarget{Namespace: req.Namespace, Pod: req.Pod, UID: req.UID, Container: req.Container}
	if req.Port > 0 {
		conn, err := e.rt.DialPod(ctx, t, req.Port)
		if errors.Is(err, linux.ErrNoContainer) {
			return fmt.Errorf("%w: %v", nodeexec.ErrNotFound, err)
		}
		if err != nil {
			return err
		}
		return forward(ctx, conn, st)
	}
	stdio := container.Stdio{Stdin: st.Stdin, Stdout: st.Stdout, Stderr: st.Stderr, TTY: req.TTY}
	if st.Resize != nil {
		stdio.Resize = func(ctx context.Context) (uint16, uint16, bool) {
			select {
			case sz, ok := <-st.Resize:
				return sz.Width, sz.Height, ok
			case <-ctx.Done():
				return 0, 0, false
			}
		}
	}
	code, err := e.rt.ExecIn(ctx, t, req.Command, stdio)
	switch {
	case errors.Is(err, linux.ErrNoContainer):
		return fmt.Errorf("%w: %v", nodeexec.ErrNotFound, err)
	case err != nil:
		return err
	case code != 0:
		return &nodeexec.ExitError{Code: code}
	}
	return nil
}

// forward copies a port-forward session's stdin to conn and conn to its
// stdout until conn's peer closes, ctx ends or the session's stdin does
// (then conn's write side is closed and the rest read).
func forward(ctx context.Context, conn net.Conn, st nodeexec.Streams) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if st.Stdin != nil {
		go func() { // ends with conn, closed on return
			_, _ = io.Copy(conn, st.Stdin)
			if cw, ok := conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}()
	}
	if st.Stdout == nil {
		<-ctx.Done()
		return nil
	}
	_, err := io.Copy(st.Stdout, conn)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

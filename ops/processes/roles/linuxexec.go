package roles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/services/nodeexec"
)

// linuxExec runs a Linux node's exec and port-forward sessions (kubectl
// exec, port-forward) in its runtime's containers and pod network
// namespaces: only pods of this node, which the runtime alone knows.
type linuxExec struct{ rt *linux.Runtime }

var _ nodeexec.Executor = linuxExec{}

// attachPoll is how often an attach reads the container's log.
const attachPoll = 200 * time.Millisecond

// attach connects the session to the container's stdio (kubectl attach),
// held by its shim: what it writes from now on, stdout and stderr apart
// (one stream with a terminal), and, when the container keeps stdin open,
// what the client types; terminal resizes reach its terminal. It ends when
// the container exits or the client leaves. A container whose shim serves
// no attach (started by an older podflow) has its CRI log followed instead,
// and what the client types is dropped.
func (e linuxExec) attach(ctx context.Context, req nodeexec.Request, st nodeexec.Streams) error {
	t := linux.ExecTarget{Namespace: req.Namespace, Pod: req.Pod, UID: req.UID, Container: req.Container}
	err := e.rt.AttachTo(ctx, t, stdioOf(req, st))
	switch {
	case errors.Is(err, linux.ErrNoContainer):
		return fmt.Errorf("%w: %v", nodeexec.ErrNotFound, err)
	case errors.Is(err, container.ErrNoAttach):
		return e.followLog(ctx, req, st)
	case ctx.Err() != nil:
		return nil // the client left
	}
	return err
}

// followLog shows what the container writes from now on: its CRI log
// followed from its end, until the container exits or the client leaves.
func (e linuxExec) followLog(ctx context.Context, req nodeexec.Request, st nodeexec.Streams) error {
	lr := linux.LogRequest{Namespace: req.Namespace, Pod: req.Pod, Container: req.Container}
	var c linux.LogChunk
	for first := true; first || len(c.Data) > 0; first = false { // to the end
		var err error
		if c, err = e.rt.ReadLog(lr, 512<<10); errors.Is(err, linux.ErrNoLogs) {
			return fmt.Errorf("%w: %v", nodeexec.ErrNotFound, err)
		} else if err != nil {
			return err
		}
		lr.Offset = c.Offset
	}
	if !c.Running {
		return fmt.Errorf("%w: container %q of pod %s/%s is not running", nodeexec.ErrNotFound, c.Container, req.Namespace, req.Pod)
	}
	t := time.NewTicker(attachPoll)
	defer t.Stop()
	for {
		c, err := e.rt.ReadLog(lr, 512<<10)
		if err != nil {
			return err
		}
		lr.Offset = c.Offset
		if err := writeCRI(c.Data, st, req.TTY); err != nil {
			return err
		}
		switch {
		case len(c.Data) > 0:
			continue
		case !c.Running:
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// writeCRI writes CRI log lines ("<time> <stream> <F|P> <message>") as
// their stream's output (all on stdout with a terminal).
func writeCRI(cri []byte, st nodeexec.Streams, tty bool) error {
	for _, line := range bytes.Split(cri, []byte{'\n'}) {
		f := bytes.SplitN(line, []byte{' '}, 4)
		if len(f) < 4 {
			continue
		}
		w := st.Stdout
		if string(f[1]) == "stderr" && !tty {
			w = st.Stderr
		}
		if w == nil {
			continue
		}
		msg := f[3]
		if string(f[2]) != "P" {
			msg = append(msg, '\n')
		}
		if _, err := w.Write(msg); err != nil {
			return err
		}
	}
	return nil
}

func (e linuxExec) Exec(ctx context.Context, req nodeexec.Request, st nodeexec.Streams) error {
	if req.Attach {
		return e.attach(ctx, req, st)
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
	code, err := e.rt.ExecIn(ctx, t, req.Command, stdioOf(req, st))
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

// stdioOf is a session's streams as a container's stdio.
func stdioOf(req nodeexec.Request, st nodeexec.Streams) container.Stdio {
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
	return stdio
}

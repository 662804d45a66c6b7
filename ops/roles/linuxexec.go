package roles

import (
	"context"
	"errors"
	"fmt"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"github.com/podflow/podflow/services/nodeexec"
)

// linuxExec runs a Linux node's exec sessions (kubectl exec) in its
// runtime's containers: only pods of this node, which the runtime alone
// knows.
type linuxExec struct{ rt *linux.Runtime }

var _ nodeexec.Executor = linuxExec{}

// ErrAttach: attach is not served by the Linux runtime yet.
var ErrAttach = errors.New("roles: attach is not supported by the Linux runtime")

func (e linuxExec) Exec(ctx context.Context, req nodeexec.Request, st nodeexec.Streams) error {
	if req.Attach {
		return ErrAttach
	}
	t := linux.ExecTarget{Namespace: req.Namespace, Pod: req.Pod, UID: req.UID, Container: req.Container}
	code, err := e.rt.ExecIn(ctx, t, req.Command, container.Stdio{Stdin: st.Stdin, Stdout: st.Stdout, Stderr: st.Stderr})
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

package linux

import (
	"errors"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/image"
	"github.com/podflow/podflow/nodeagent/linux/network"
)

// agentError maps the kernel libraries' sentinel errors to the agent's codes
// (the Kubernetes reasons users see), keeping err's message and chain:
//
//	image.ErrNeverPull  → nodeagent.CodeImageNeverPull (ErrImageNeverPull)
//	image.ErrPull       → nodeagent.CodeImagePull (ErrImagePull)
//	image.ErrRootfs     → nodeagent.CodeCreateContainer (CreateContainerError)
//	network.ErrSandbox  → nodeagent.CodeSandbox (FailedCreatePodSandBox)
//
// Any other error (nil too) is returned as it is.
func agentError(err error) error {
	var code nodeagent.Code
	switch {
	case err == nil:
		return nil
	case errors.Is(err, image.ErrNeverPull):
		code = nodeagent.CodeImageNeverPull
	case errors.Is(err, image.ErrPull):
		code = nodeagent.CodeImagePull
	case errors.Is(err, image.ErrRootfs):
		code = nodeagent.CodeCreateContainer
	case errors.Is(err, network.ErrSandbox):
		code = nodeagent.CodeSandbox
	default:
		return err
	}
	return nodeagent.Errorf(code, "%w", err)
}

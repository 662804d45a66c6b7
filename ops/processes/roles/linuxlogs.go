package roles

import (
	"errors"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/services/nodelogs"
)

// readLog serves one log request through the node's agent (which picks
// the container instance from the pod's status, as kubelet does); a
// refusal keeps its class and kubelet's words for the apiserver.
func readLog(agent *nodeagent.Agent, req nodelogs.Request, max int) (nodelogs.Reply, error) {
	c, err := agent.ReadLog(nodeagent.LogRequest{Namespace: req.Namespace, Pod: req.Pod, Container: req.Container,
		Previous: req.Previous, Offset: req.Offset, File: req.File, TailLines: req.TailLines, SinceTime: req.SinceTime}, max)
	if ae, ok := errors.AsType[*nodeagent.Error](err); ok {
		switch ae.Code {
		case nodeagent.CodeBadRequest:
			return nodelogs.Reply{}, &nodelogs.Error{Reason: nodelogs.ReasonBadRequest, Message: ae.Msg}
		case nodeagent.CodeNotFound:
			return nodelogs.Reply{}, &nodelogs.Error{Reason: nodelogs.ReasonNotFound, Message: ae.Msg}
		}
	}
	return nodelogs.Reply{Container: c.Container, Data: c.Data, Offset: c.Offset, File: c.File, Running: c.Running}, err
}

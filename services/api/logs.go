package api

import (
	"context"
	"errors"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/nodelogs"
	"github.com/podflow/podflow/services/stage"
)

var _ apiserver.LogBackend = (*Stage)(nil)

// PodLogs reads a container's log from the pod's node (pods/log).
func (s *Stage) PodLogs(ctx context.Context, pod *corev1.Pod, container string, previous bool) ([]byte, *corev1.Status) {
	name := pod.GetMetadata().GetName()
	node := pod.GetSpec().GetNodeName()
	if node == "" {
		return nil, stage.Failure(400, eventsv1.ReasonBadRequest, "pods", name, "pod %q has no node yet: no logs", name)
	}
	cri, err := nodelogs.Fetch(ctx, s.env.NATS, node, nodelogs.Request{
		Namespace: pod.GetMetadata().GetNamespace(), Pod: name, Container: container, Previous: previous,
	})
	switch {
	case errors.Is(err, nodelogs.ErrNode):
		return nil, stage.Failure(404, eventsv1.ReasonNotFound, "pods", name, "%v", err)
	case err != nil:
		return nil, stage.Failure(503, "ServiceUnavailable", "pods", name,
			"the node %q does not serve logs (simulated nodes keep none): %v", node, err)
	}
	return nodelogs.Messages(cri), nil
}

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

// PodLogs opens a container's log on the pod's node (pods/log): it is read
// from there a chunk (nodelogs.ChunkBytes) at a time as the HTTPS handler
// writes it, so the api stage never holds more than one chunk of it.
func (s *Stage) PodLogs(ctx context.Context, pod *corev1.Pod, opts apiserver.LogOptions) (apiserver.LogStream, *corev1.Status) {
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
	stream, err := nodelogs.Open(ctx, s.env.NATS, node, req, nodelogs.Options{
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
			"the node %q does not serve logs (simulated nodes keep none): %v", node, err)
	}
	return stream, nil
}

package apiserver

// pods/status (get, update, patch), as kube-apiserver's pod StatusREST
// with podStatusStrategy: a status write changes the status and the
// metadata a client may change (labels, annotations); the spec, the
// owner references and the system fields stay as stored, and a status
// without a qosClass keeps the stored one. It is written here,
// compare-and-swap at the revision the request was built from. The pod's
// node keeps reporting: its next report replaces what it owns, as
// kubelet's status manager does.

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/stage"
)

// podStatusSubresource reports whether req writes pods/status.
func podStatusSubresource(req *request) bool {
	return req.res.name == "pods" && req.res.group == "" && req.sub == "status" && req.name != "" &&
		(req.verb == "update" || req.verb == "patch")
}

// updatePodStatus writes next (built from current by the request) as the
// status subresource does.
func (s *Server) updatePodStatus(ctx context.Context, req *request, current, next *corev1.Pod, dry bool) (*corev1.Status, proto.Message) {
	name := current.GetMetadata().GetName()
	out := proto.CloneOf(current)
	md, nmd := out.GetMetadata(), next.GetMetadata()
	md.Labels, md.Annotations, md.ManagedFields = nmd.GetLabels(), nmd.GetAnnotations(), nmd.GetManagedFields()
	out.Status = proto.CloneOf(next.GetStatus())
	if out.GetStatus().GetQosClass() == "" && current.GetStatus().GetQosClass() != "" {
		if out.Status == nil {
			out.Status = &corev1.PodStatus{}
		}
		out.Status.QosClass = current.GetStatus().GetQosClass()
	}
	if dry {
		return stage.Success(http.StatusOK, "pods", name), out
	}
	if _, err := s.store.Update(ctx, out); err != nil {
		if errors.Is(err, raftstore.ErrConflict) {
			return conflict("pods", name), nil
		}
		return storeStatus(err, req.res, name), nil
	}
	return stage.Success(http.StatusOK, "pods", name), out
}

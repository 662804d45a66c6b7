package apiserver

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/validate"
)

// isPodStatusWrite reports whether req writes a pod's status subresource
// (PUT or PATCH pods/status), as a controller or a test may do with
// `update pods/status` permission (kube's DaemonSet e2e fails a daemon
// pod this way).
func isPodStatusWrite(req *request) bool {
	return req.res.name == "pods" && req.res.group == "" && req.sub == "status" && (req.verb == "update" || req.verb == "patch")
}

// updatePodStatus writes pod's status over the stored pod current as
// kube-apiserver's pod status strategy does: the spec, owner references,
// deletion timestamp and finalizers stay the stored ones, labels and
// annotations are the request's, and an empty qosClass keeps the stored
// one (which is immutable). The annotation recording the last node report
// applied (podrules.AnnotationStatusSeq) is podflow's and stays as stored.
// The write is a compare-and-swap on current's revision: a conflict is
// returned for the caller to retry or answer.
func (s *Server) updatePodStatus(ctx context.Context, current, pod *corev1.Pod, dry bool) (*corev1.Status, proto.Message) {
	name := current.GetMetadata().GetName()
	next := proto.CloneOf(current)
	next.Status = proto.CloneOf(pod.GetStatus())
	if next.Status == nil {
		next.Status = &corev1.PodStatus{}
	}
	if next.Status.QosClass == "" {
		next.Status.QosClass = current.GetStatus().GetQosClass()
	}
	if q, was := next.GetStatus().GetQosClass(), current.GetStatus().GetQosClass(); was != "" && q != was {
		return validate.InvalidStatus("Pod", name, field.ErrorList{field.Invalid(field.NewPath("status", "qosClass"), q, "field is immutable")}), nil
	}
	md := next.Metadata
	md.Labels = pod.GetMetadata().GetLabels()
	md.Annotations = pod.GetMetadata().GetAnnotations()
	md.ManagedFields = pod.GetMetadata().GetManagedFields()
	if seq, ok := current.GetMetadata().GetAnnotations()[podrules.AnnotationStatusSeq]; ok {
		if md.Annotations == nil {
			md.Annotations = map[string]string{}
		}
		md.Annotations[podrules.AnnotationStatusSeq] = seq
	} else {
		delete(md.Annotations, podrules.AnnotationStatusSeq)
	}
	if len(md.Annotations) == 0 {
		md.Annotations = nil
	}
	ok := stage.Success(http.StatusOK, "pods", name)
	if dry || proto.Equal(next, current) {
		return ok, next
	}
	if _, err := s.store.Update(ctx, next); err != nil {
		if errors.Is(err, raftstore.ErrConflict) {
			return conflict("pods", name), nil
		}
		return storeStatus(err, lookupResource("v1", "pods"), name), nil
	}
	return ok, next
}

package apiserver

// nodes/status (get, update, patch), as kube-apiserver's node StatusREST:
// a status write changes the status (and metadata) and keeps the spec
// (nodeStatusStrategy.PrepareForUpdate), validated by kube's
// ValidateNodeUpdate (metadata update rules, resource names and
// quantities, duplicate addresses). A client advertises an extended
// resource this way (the scheduler's e2e tests give a node
// example.com/fakecpu); the node agent's heartbeat keeps what it does not
// manage (ops/processes/nodewire), as kubelet does. RBAC authorizes the
// nodes/status resource; a node agent writes its own Node through the
// store, whose write policy lets it write no other (services/pipeline).

import (
	"context"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/validation"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/validate"
)

// nodeStatusRequest reports whether req is a nodes/status request this
// file serves.
func nodeStatusRequest(req *request) bool {
	return req.res.name == "nodes" && req.res.group == "" && req.name != "" && req.sub == "status" &&
		(req.verb == "get" || req.verb == "update" || req.verb == "patch")
}

// updateNodeStatus writes next (built from current by the request) as the
// status subresource does: the spec stays current's, compare-and-swap at
// the revision the request was built from.
func (s *Server) updateNodeStatus(ctx context.Context, req *request, current, next *corev1.Node, dry bool) (*corev1.Status, proto.Message) {
	name := current.GetMetadata().GetName()
	out := proto.CloneOf(next)
	out.Spec = proto.CloneOf(current.GetSpec()) // nodeStatusStrategy.PrepareForUpdate
	keepSystemFields(out, current)
	if errs := validateNodeStatus(out, current); len(errs) > 0 {
		return validate.InvalidStatus("Node", name, errs), nil
	}
	return s.writeSubresource(ctx, req, "nodes", name, out, dry)
}

// validateNodeStatus is kube's ValidateNodeUpdate over the internal forms
// of node and old.
func validateNodeStatus(node, old *corev1.Node) field.ErrorList {
	return validateInternalUpdate(node, old, apiv1.Convert_v1_Node_To_core_Node, validation.ValidateNodeUpdate)
}

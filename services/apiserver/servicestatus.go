package apiserver

// services/status (get, update, patch), as kube-apiserver's service
// StatusREST: a status write changes the status (and metadata) and keeps
// the spec, validated by kube's ValidateServiceStatusUpdate (metadata
// update rules, load balancer ingress). The api stage's Service update
// allocates ClusterIPs and node ports from the spec, which a status write
// never changes, so this writes the store here, compare-and-swap at the
// revision the request was built from.

import (
	"context"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/validation"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/validate"
)

// serviceStatusRequest reports whether req is a services/status request
// this file serves.
func serviceStatusRequest(req *request) bool {
	return req.res.name == "services" && req.res.group == "" && req.name != "" && req.sub == "status" &&
		(req.verb == "get" || req.verb == "update" || req.verb == "patch")
}

// updateServiceStatus writes next (built from current by the request) as
// the status subresource does: the spec stays current's.
func (s *Server) updateServiceStatus(ctx context.Context, req *request, current, next *corev1.Service, dry bool) (*corev1.Status, proto.Message) {
	name := current.GetMetadata().GetName()
	out := proto.CloneOf(next)
	out.Spec = proto.CloneOf(current.GetSpec()) // serviceStatusStrategy.PrepareForUpdate
	keepSystemFields(out, current)
	defaultIngressIPMode(out)
	if errs := validateServiceStatus(out, current); len(errs) > 0 {
		return validate.InvalidStatus("Service", name, errs), nil
	}
	return s.writeSubresource(ctx, req, "services", name, out, dry)
}

// validateServiceStatus is kube's ValidateServiceStatusUpdate over the
// internal forms of svc and old.
func validateServiceStatus(svc, old *corev1.Service) field.ErrorList {
	return validateInternalUpdate(svc, old, apiv1.Convert_v1_Service_To_core_Service, validation.ValidateServiceStatusUpdate)
}

// defaultIngressIPMode is kube's SetDefaults_Service for the status: a
// LoadBalancer Service's ingress with an IP and no ipMode is "VIP".
func defaultIngressIPMode(svc *corev1.Service) {
	if svc.GetSpec().GetType() != "LoadBalancer" {
		return
	}
	for _, ing := range svc.GetStatus().GetLoadBalancer().GetIngress() {
		if ing.GetIp() != "" && ing.IpMode == nil {
			ing.IpMode = proto.String("VIP")
		}
	}
}

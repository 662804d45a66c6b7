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
	"fmt"

	"google.golang.org/protobuf/proto"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	api "k8s.io/kubernetes/pkg/apis/core"
	apiv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/validation"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/manifest"
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
	in, err := internalService(svc)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("status"), err)}
	}
	prev, err := internalService(old)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("status"), err)}
	}
	return validation.ValidateServiceStatusUpdate(in, prev)
}

func internalService(svc *corev1.Service) (*api.Service, error) {
	k, err := manifest.ToKube(svc)
	if err != nil {
		return nil, err
	}
	v1svc, ok := k.(*k8scorev1.Service)
	if !ok {
		return nil, fmt.Errorf("a Service converts to %T", k)
	}
	out := &api.Service{}
	if err := apiv1.Convert_v1_Service_To_core_Service(v1svc, out, nil); err != nil {
		return nil, err
	}
	return out, nil
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

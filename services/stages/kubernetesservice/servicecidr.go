package kubernetesservice

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// The default ServiceCIDR, as kube-apiserver's default-servicecidr
// controller keeps it.
const (
	// DefaultServiceCIDRName names the ServiceCIDR of the service CIDR
	// the api replicas allocate from.
	DefaultServiceCIDRName = "kubernetes"
	// ServiceCIDRReadyMessage is its Ready condition's message.
	ServiceCIDRReadyMessage = "Kubernetes default Service CIDR is ready"
)

// serviceCIDR is the content of a networking.k8s.io/v1 ServiceCIDR (its
// spec and status) as the store keeps it.
type serviceCIDR struct {
	Spec struct {
		CIDRs []string `json:"cidrs,omitempty"`
	} `json:"spec"`
	Status struct {
		Conditions []condition `json:"conditions,omitempty"`
	} `json:"status"`
}

// condition is a metav1.Condition.
type condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
}

// ensureServiceCIDR keeps the default ServiceCIDR as kube-apiserver's
// default-servicecidr controller does: created with the service CIDR
// and Ready when missing; an existing one whose CIDRs are the service
// CIDR's and that has no Ready condition (or an Unknown one) is made
// Ready; one that differs, or is not Ready, or is being deleted, is
// left alone (kube reports it and changes nothing).
func (c *Controller) ensureServiceCIDR(ctx context.Context) error {
	cidrs := []string{c.cfg.ServiceIPs.CIDR().String()}
	ready := condition{Type: "Ready", Status: "True", Message: ServiceCIDRReadyMessage,
		LastTransitionTime: c.now().UTC().Format("2006-01-02T15:04:05Z")}
	obj, err := c.env.Store.GetKind(ctx, objects.ServiceCIDRs, "", DefaultServiceCIDRName)
	if errors.Is(err, raftstore.ErrNotFound) {
		var content serviceCIDR
		content.Spec.CIDRs = cidrs
		content.Status.Conditions = []condition{ready}
		b, err := json.Marshal(content)
		if err != nil {
			return err
		}
		u := objects.ServiceCIDRs.New().(*corev1.Unstructured)
		u.Metadata = &corev1.ObjectMeta{Name: DefaultServiceCIDRName, Uid: uuid.NewString(),
			CreationTimestamp: timestamppb.New(c.now()), Generation: 1}
		u.Content = b
		_, err = c.env.Store.Create(ctx, u)
		if errors.Is(err, raftstore.ErrAlreadyExists) {
			return nil // another replica created it
		}
		return err
	}
	if err != nil {
		return err
	}
	u := obj.(*corev1.Unstructured)
	if u.GetMetadata().GetDeletionTimestamp() != nil {
		return nil
	}
	// The whole content, to keep what this struct does not know.
	var raw map[string]json.RawMessage
	var content serviceCIDR
	if err := json.Unmarshal(u.GetContent(), &raw); err != nil {
		return err
	}
	if err := json.Unmarshal(u.GetContent(), &content); err != nil {
		return err
	}
	if !slices.Equal(content.Spec.CIDRs, cidrs) {
		return nil
	}
	i := slices.IndexFunc(content.Status.Conditions, func(c condition) bool { return c.Type == "Ready" })
	switch {
	case i < 0:
		content.Status.Conditions = append(content.Status.Conditions, ready)
	case content.Status.Conditions[i].Status == "Unknown":
		content.Status.Conditions[i] = ready
	default:
		return nil
	}
	status, err := json.Marshal(content.Status)
	if err != nil {
		return err
	}
	if raw == nil {
		raw = map[string]json.RawMessage{}
	}
	raw["status"] = status
	if u.Content, err = json.Marshal(raw); err != nil {
		return err
	}
	_, err = c.env.Store.Update(ctx, u)
	if errors.Is(err, raftstore.ErrConflict) {
		return nil // written since: the next pass looks again
	}
	return err
}

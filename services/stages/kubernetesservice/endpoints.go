package kubernetesservice

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// LabelSkipMirror keeps the EndpointSlice mirroring (the endpoints
// stage) off default/kubernetes' Endpoints: their slice is written here.
const LabelSkipMirror = "endpointslice.kubernetes.io/skip-mirror"

// desiredEndpoints is default/kubernetes' core/v1 Endpoints listing addrs
// on port, as kube-apiserver's endpoint reconciler writes them (skip-mirror,
// one subset).
func desiredEndpoints(addrs []string, port uint16) *corev1.Endpoints {
	sub := &corev1.EndpointSubset{Ports: []*corev1.EndpointsPort{{Name: PortName, Port: int32(port), Protocol: "TCP"}}}
	for _, a := range addrs {
		sub.Addresses = append(sub.Addresses, &corev1.EndpointAddress{Ip: a})
	}
	return &corev1.Endpoints{
		Metadata: &corev1.ObjectMeta{Name: ServiceName, Namespace: Namespace, Labels: map[string]string{LabelSkipMirror: "true"}},
		Subsets:  []*corev1.EndpointSubset{sub},
	}
}

// reconcileEndpoints makes default/kubernetes' Endpoints list addrs on
// port (created when missing, compare-and-swapped when they differ; a
// conflict is another replica's write, which the next pass compares).
func (c *Controller) reconcileEndpoints(ctx context.Context, addrs []string, port uint16) error {
	want := desiredEndpoints(addrs, port)
	cur, err := objects.Get[*corev1.Endpoints](ctx, c.env.Store, Namespace, ServiceName)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		md := want.Metadata
		md.Uid, md.CreationTimestamp = uuid.NewString(), timestamppb.New(c.now())
		_, err := c.env.Store.Create(ctx, want)
		if errors.Is(err, raftstore.ErrAlreadyExists) {
			return nil
		}
		return err
	case err != nil:
		return err
	}
	if len(cur.GetSubsets()) == 1 && proto.Equal(cur.GetSubsets()[0], want.Subsets[0]) && cur.GetMetadata().GetLabels()[LabelSkipMirror] == "true" {
		return nil
	}
	next := proto.CloneOf(cur)
	next.Subsets = want.Subsets
	if next.Metadata.Labels == nil {
		next.Metadata.Labels = map[string]string{}
	}
	next.Metadata.Labels[LabelSkipMirror] = "true"
	_, err = c.env.Store.Update(ctx, next)
	if errors.Is(err, raftstore.ErrConflict) {
		return nil
	}
	return err
}

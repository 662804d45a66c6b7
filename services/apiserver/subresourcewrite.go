package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// keepSystemFields gives out the system fields of current's metadata:
// they are the server's (ValidateObjectMetaUpdate refuses changing them;
// a client sends them as it read them, to the second). An update without
// a resourceVersion is unconditional: of what was read.
func keepSystemFields(out, current objects.Object) {
	md, cur := objects.Meta(out), objects.Meta(current)
	md.Uid, md.CreationTimestamp, md.DeletionTimestamp = cur.GetUid(), cur.GetCreationTimestamp(), cur.GetDeletionTimestamp()
	md.DeletionGracePeriodSeconds, md.Generation = cur.DeletionGracePeriodSeconds, cur.GetGeneration()
	if md.GetResourceVersion() == "" {
		md.ResourceVersion = cur.GetResourceVersion()
	}
}

// writeSubresource stores out, a validated subresource write of the
// object resource/name, compare-and-swap at its resourceVersion; a dry
// run stores nothing.
func (s *Server) writeSubresource(ctx context.Context, req *request, resource, name string, out objects.Object, dry bool) (*corev1.Status, proto.Message) {
	if dry {
		return stage.Success(http.StatusOK, resource, name), out
	}
	if _, err := s.store.Update(ctx, out); err != nil {
		if errors.Is(err, raftstore.ErrConflict) {
			return conflict(resource, name), nil
		}
		return storeStatus(err, req.res, name), nil
	}
	return stage.Success(http.StatusOK, resource, name), out
}

// validateInternalUpdate runs kube's update validation (validate) over the
// internal forms of next and old, converted from their kube v1 type V by
// convert (k8s.io/kubernetes's generated conversion).
func validateInternalUpdate[V, I any](next, old objects.Object, convert func(*V, *I, conversion.Scope) error, validate func(next, old *I) field.ErrorList) field.ErrorList {
	in, err := internalOf(next, convert)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("status"), err)}
	}
	prev, err := internalOf(old, convert)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("status"), err)}
	}
	return validate(in, prev)
}

// internalOf is obj in kube's internal type I, through its v1 type V.
func internalOf[V, I any](obj objects.Object, convert func(*V, *I, conversion.Scope) error) (*I, error) {
	k, err := manifest.ToKube(obj)
	if err != nil {
		return nil, err
	}
	v, ok := any(k).(*V)
	if !ok {
		return nil, fmt.Errorf("a %T converts to %T", obj, k)
	}
	out := new(I)
	if err := convert(v, out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

package api

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// maxDeleteRetries bounds how often a delete is retried from a fresh read
// when the object moved on between the read and the write.
const maxDeleteRetries = 16

// deleteGeneric deletes an object as kube-apiserver's generic store does
// (stage.DeleteObjectWith): the garbage collector's finalizers are set as
// opts and the kind's default policy ask ("orphan" for
// propagationPolicy Orphan, "foregroundDeletion" for Foreground); one
// with finalizers is then marked for deletion and answered as marked (200
// with the object), one without is deleted. A CustomResourceDefinition is first marked as
// apiextensions-apiserver's REST does on the first DELETE: the
// customresourcecleanup finalizer, deletionTimestamp and the Terminating
// condition, so that the CRD controller deletes its objects before it
// goes.
func (s *Stage) deleteGeneric(ctx context.Context, kind objects.Kind, ns, name string, opts stage.DeleteOptions) (*corev1.Status, proto.Message) {
	for attempt := 0; ; attempt++ {
		obj, err := s.env.Store.GetKind(ctx, kind, ns, name)
		if errors.Is(err, raftstore.ErrNotFound) {
			return stage.NotFound(kind.Resource, name), nil
		}
		if err != nil {
			return stage.Internal(err), nil
		}
		var out objects.Object
		var gone bool
		if u, ok := obj.(*corev1.Unstructured); ok && kind.Name == objects.CustomResourceDefinitions.Name &&
			kind.APIGroup == objects.CustomResourceDefinitions.APIGroup && u.GetMetadata().GetDeletionTimestamp() == nil {
			if err = markCRDForDeletion(u); err == nil {
				var rev int64
				if rev, err = s.env.Store.Update(ctx, u); err == nil {
					objects.SetRevision(u, rev)
					out = u
				}
			}
		} else {
			out, gone, err = stage.DeleteObjectWith(ctx, s.env.Store, kind, obj, &opts)
		}
		switch {
		case errors.Is(err, raftstore.ErrConflict) && attempt < maxDeleteRetries && ctx.Err() == nil:
			continue
		case errors.Is(err, raftstore.ErrNotFound):
			return stage.NotFound(kind.Resource, name), nil
		case err != nil:
			return stage.Internal(err), nil
		case gone:
			return stage.Success(200, kind.Resource, name), nil
		}
		return stage.Success(200, kind.Resource, name), out
	}
}

// markCRDForDeletion is the first DELETE of a CustomResourceDefinition
// (apiextensions-apiserver's customresourcedefinition REST Delete):
// deletionTimestamp now, the customresourcecleanup.apiextensions.k8s.io
// finalizer, and Terminating with reason InstanceDeletionPending.
func markCRDForDeletion(u *corev1.Unstructured) error {
	k, err := manifest.ToKube(u)
	if err != nil {
		return err
	}
	crd, ok := k.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return fmt.Errorf("api: a stored CustomResourceDefinition is a %T", k)
	}
	now := metav1.Now()
	crd.DeletionTimestamp = &now
	zero := int64(0)
	crd.DeletionGracePeriodSeconds = &zero
	if !apihelpers.CRDHasFinalizer(crd, apiextensionsv1.CustomResourceCleanupFinalizer) {
		crd.Finalizers = append(crd.Finalizers, apiextensionsv1.CustomResourceCleanupFinalizer)
	}
	apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue, Reason: "InstanceDeletionPending",
		Message: "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
	})
	m, err := manifest.FromKube(crd)
	if err != nil {
		return err
	}
	rv := u.GetMetadata().GetResourceVersion()
	proto.Reset(u)
	proto.Merge(u, m.(*corev1.Unstructured))
	u.Metadata.ResourceVersion = rv
	return nil
}

package apiserver

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
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

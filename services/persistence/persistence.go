// Package persistence is the persistence stage: it writes an admitted pod
// to the store — the record of intent; until the store's quorum has it,
// the pod does not exist — and answers the request with 201 Created while
// the pod is not yet running. It sets the uid, creationTimestamp,
// generation and phase Pending, then publishes PodPersisted.
//
// The uid is derived from the request id, so a redelivered PodAdmitted
// finds its own pod already stored and completes the same way, while a
// different request for the same name gets 409 AlreadyExists.
package persistence

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// Stage is one replica of the persistence stage.
type Stage struct{ env stage.Env }

// New returns a persistence stage replica.
func New(env stage.Env) *Stage { return &Stage{env: env} }

// UID returns the pod uid podflow assigns to the pod of a request.
func UID(requestID string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("podflow:pod:"+requestID)).String()
}

// Handle persists one PodAdmitted.
func (s *Stage) Handle(ctx context.Context, d *bus.Delivery) error {
	in := d.Envelope.GetPodAdmitted()
	if in == nil {
		return bus.Permanent(fmt.Errorf("persistence: unexpected event %s", d.Envelope.Type()))
	}
	if d.Envelope.GetRequestId() == "" {
		return bus.Permanent(errors.New("persistence: PodAdmitted without a request id"))
	}
	pod := proto.CloneOf(in.GetPod())
	md := pod.GetMetadata()
	md.Uid = UID(d.Envelope.GetRequestId())
	md.Generation = 1
	md.ResourceVersion = ""
	md.CreationTimestamp = d.Envelope.GetTime()
	if md.Annotations == nil {
		md.Annotations = map[string]string{}
	}
	md.Annotations[stage.AnnotationRequestID] = d.Envelope.GetRequestId()
	if tp := d.Envelope.GetTraceparent(); tp != "" {
		md.Annotations[stage.AnnotationTraceparent] = tp
	}
	if pod.Status == nil {
		pod.Status = &corev1.PodStatus{}
	}
	pod.Status.Phase = "Pending"

	_, err := s.env.Store.Create(ctx, pod)
	if errors.Is(err, raftstore.ErrAlreadyExists) {
		stored, gerr := objects.Get[*corev1.Pod](ctx, s.env.Store, md.GetNamespace(), md.GetName())
		switch {
		case gerr == nil && stored.GetMetadata().GetUid() == md.Uid:
			pod, err = stored, nil // a redelivery: our pod is already stored
		case gerr == nil || errors.Is(gerr, raftstore.ErrNotFound):
			st := stage.AlreadyExists("pods", md.GetName())
			return stage.Reject(ctx, s.env, d, st, in.GetReplyTo())
		default:
			return gerr
		}
	}
	if err != nil {
		return err
	}
	next := d.Next(&eventsv1.PodPersisted{Pod: pod, Revision: objects.Revision(pod)})
	next.PodUid, next.Generation = md.Uid, 1
	if err := s.env.Pub.Publish(ctx, next); err != nil {
		return err
	}
	return stage.Reply(s.env, in.GetReplyTo(), stage.Success(201, "pods", md.GetName()), pod)
}

// Package persistence is the persistence stage: it writes an admitted pod
// to the store — the record of intent; until the store's quorum has it,
// the pod does not exist — and answers the request with 201 Created while
// the pod is not yet running. It sets the uid, creationTimestamp,
// generation and phase Pending, then publishes PodPersisted.
//
// The uid is the server's: the api stage assigns it (envelope pod_uid,
// from the stream sequence of the PodRequested, or at random for an HTTPS
// creation) and persistence stores it, so no client can choose a pod's
// uid or make two pods share one. A redelivered PodAdmitted carries the
// same uid, finds its own pod already stored and completes the same way;
// a different request for the same name gets 409 AlreadyExists, and a
// request id already used by another pod (the podflow.io/request-id of a
// stored pod) is refused with 409 Conflict.
package persistence

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// Stage is one replica of the persistence stage.
type Stage struct {
	env stage.Env

	// requests indexes the stored pods by their request id, from an
	// informer started by Start (without it, only the pod's own key is
	// checked).
	mu       sync.Mutex
	requests map[string]map[string]podRef // request id -> uid -> pod
}

type podRef struct{ namespace, name, uid string }

var _ stage.Starter = (*Stage)(nil)

// New returns a persistence stage replica.
func New(env stage.Env) *Stage { return &Stage{env: env} }

// Start watches the stored pods to index them by request id; it returns
// once the index is synced.
func (s *Stage) Start(ctx context.Context, g *errgroup.Group) error {
	s.mu.Lock()
	s.requests = map[string]map[string]podRef{}
	s.mu.Unlock()
	index := func(p *corev1.Pod, add bool) {
		md := p.GetMetadata()
		id := md.GetAnnotations()[stage.AnnotationRequestID]
		if id == "" {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if !add {
			delete(s.requests[id], md.GetUid())
			if len(s.requests[id]) == 0 {
				delete(s.requests, id)
			}
			return
		}
		if s.requests[id] == nil {
			s.requests[id] = map[string]podRef{}
		}
		s.requests[id][md.GetUid()] = podRef{md.GetNamespace(), md.GetName(), md.GetUid()}
	}
	inf, err := informer.New[*corev1.Pod](s.env.Store, "", informer.Handlers[*corev1.Pod]{
		OnAdd:    func(p *corev1.Pod) { index(p, true) },
		OnUpdate: func(_, p *corev1.Pod) { index(p, true) },
		OnDelete: func(p *corev1.Pod) { index(p, false) },
	})
	if err != nil {
		return err
	}
	var infs informer.Group
	infs.Add(inf)
	return infs.Start(ctx, g)
}

// requestUsedBy returns the other pod that holds requestID, if the index
// knows one.
func (s *Stage) requestUsedBy(requestID, uid string) (podRef, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for u, ref := range s.requests[requestID] {
		if u != uid {
			return ref, true
		}
	}
	return podRef{}, false
}

// reusedRequest is the refusal of a request id another pod holds.
func reusedRequest(requestID, name string, other podRef) *corev1.Status {
	return stage.Failure(409, eventsv1.ReasonConflict, "pods", name,
		"request id %q is already used by pod %s/%s: every pod creation needs a request id of its own", requestID, other.namespace, other.name)
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
	uid := d.Envelope.GetPodUid()
	if uid == "" {
		return bus.Permanent(errors.New("persistence: PodAdmitted without a pod uid (the api stage assigns it)"))
	}
	pod := proto.CloneOf(in.GetPod())
	md := pod.GetMetadata()
	if other, used := s.requestUsedBy(d.Envelope.GetRequestId(), uid); used {
		return stage.Reject(ctx, s.env, d, reusedRequest(d.Envelope.GetRequestId(), md.GetName(), other), in.GetReplyTo())
	}
	md.Uid = uid
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
		case gerr == nil && stored.GetMetadata().GetAnnotations()[stage.AnnotationRequestID] == d.Envelope.GetRequestId():
			other := podRef{md.GetNamespace(), md.GetName(), stored.GetMetadata().GetUid()}
			return stage.Reject(ctx, s.env, d, reusedRequest(d.Envelope.GetRequestId(), md.GetName(), other), in.GetReplyTo())
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
	next.PodUid, next.Generation = uid, 1
	if err := s.env.Pub.Publish(ctx, next); err != nil {
		return err
	}
	return stage.Reply(s.env, in.GetReplyTo(), stage.Success(201, "pods", md.GetName()), pod)
}

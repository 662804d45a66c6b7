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
// a different request for the same name gets 409 AlreadyExists.
//
// A request id belongs to one pod at a time. The pod's create is one store
// transaction with the creation of its request id's key (RequestIDKey,
// under pipeline.RequestIDPrefix, naming the pod), each on the condition
// that its key does not exist yet; so of concurrent requests with one
// request id — on any replica, however late its caches — exactly one
// stores its pod, and the others get 409 Conflict naming it. The key goes
// with its pod: a create that meets the key of a pod no longer stored
// deletes it (at the revision it read) and tries again, and Reconcile
// deletes every key whose pod is gone, at most every
// Config.RequestIDSweep (the sweep reads every stored pod), so the keys do
// not outlive their pods by much more than that.
package persistence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// Stage is one replica of the persistence stage.
type Stage struct {
	env stage.Env
	cfg Config

	mu        sync.Mutex
	lastSweep time.Time // of the last sweep of request id keys that completed
}

var _ stage.Reconciler = (*Stage)(nil)

// Config tunes a persistence replica.
type Config struct {
	// RequestIDSweep is the least time between two sweeps of the request
	// id keys whose pods are gone (Reconcile). A sweep reads every stored
	// pod: at 100,000 pods, every 10 s resync would move 150 MB a minute
	// through the store for keys that only take room (a create that meets
	// a stale key frees it itself). Default 5 minutes.
	RequestIDSweep time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// DefaultConfig is New's configuration.
func DefaultConfig() Config { return Config{RequestIDSweep: 5 * time.Minute} }

// New returns a persistence stage replica with DefaultConfig.
func New(env stage.Env) *Stage { return NewWithConfig(env, DefaultConfig()) }

// NewWithConfig returns a persistence stage replica with cfg; a
// RequestIDSweep of zero or less sweeps at every Reconcile.
func NewWithConfig(env stage.Env, cfg Config) *Stage {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Stage{env: env, cfg: cfg}
}

// RequestIDKey is the store key that holds requestID for the pod that
// has it: pipeline.RequestIDPrefix and the id's SHA-256 (a request id is
// the client's string, of any length and alphabet).
func RequestIDKey(requestID string) string {
	sum := sha256.Sum256([]byte(requestID))
	return pipeline.RequestIDPrefix + hex.EncodeToString(sum[:])
}

// reusedRequest is the refusal of a request id another pod holds.
func reusedRequest(requestID, name string, other *corev1.ObjectReference) *corev1.Status {
	return stage.Failure(409, eventsv1.ReasonConflict, "pods", name,
		"request id %q is already used by pod %s/%s: every pod creation needs a request id of its own", requestID, other.GetNamespace(), other.GetName())
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
	// The pod is this delivery's own (a redelivery decodes its own copy):
	// it is completed in place, not copied.
	pod := in.GetPod()
	md := pod.GetMetadata()
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

	stored, st, err := s.create(ctx, pod, d.Envelope.GetRequestId())
	switch {
	case err != nil:
		return err
	case st != nil:
		return stage.Reject(ctx, s.env, d, st, in.GetReplyTo())
	case stored == nil:
		return nil // our pod was stored and is gone since: nothing to redo
	}
	pod = stored
	next := d.Next(&eventsv1.PodPersisted{Pod: pod, Revision: objects.Revision(pod)})
	next.PodUid, next.Generation = uid, 1
	if err := s.env.Pub.Publish(ctx, next); err != nil {
		return err
	}
	ok := stage.Success(201, "pods", md.GetName())
	ok.Warnings = in.GetWarnings() // the admission webhooks' and policies', for the client
	return stage.Reply(s.env, in.GetReplyTo(), ok, pod)
}

// create stores pod (its uid set) and the key of requestID naming it, in
// one transaction. It returns the stored pod — pod, or the one a
// previous delivery stored — or the refusal; neither when this request's
// pod was stored and has been deleted since (a late redelivery).
func (s *Stage) create(ctx context.Context, pod *corev1.Pod, requestID string) (*corev1.Pod, *corev1.Status, error) {
	md := pod.GetMetadata()
	podKey, err := objects.KeyOf(pod)
	if err != nil {
		return nil, nil, bus.Permanent(err)
	}
	value, err := objects.Encode(pod)
	if err != nil {
		return nil, nil, bus.Permanent(err)
	}
	idKey := RequestIDKey(requestID)
	ref, err := vt.Marshal(&corev1.ObjectReference{Kind: "Pod", ApiVersion: "v1", Namespace: md.GetNamespace(), Name: md.GetName(), Uid: md.GetUid()})
	if err != nil {
		return nil, nil, err
	}
	for {
		rev, err := s.env.Store.KV().Txn(ctx, raftstore.Txn{
			Compares: []raftstore.Compare{{Key: podKey, ModRevision: objects.Absent}, {Key: idKey, ModRevision: objects.Absent}},
			Ops:      []raftstore.Op{{Type: raftstore.OpPut, Key: podKey, Value: value}, {Type: raftstore.OpPut, Key: idKey, Value: ref}},
		})
		var conflict *raftstore.Error
		switch {
		case err == nil:
			objects.SetRevision(pod, rev)
			return pod, nil, nil
		case !errors.Is(err, raftstore.ErrConflict) || !errors.As(err, &conflict):
			return nil, nil, fmt.Errorf("create pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
		case conflict.Key == podKey:
			return s.nameTaken(ctx, pod, requestID)
		}
		// The request id's key exists: whose is it?
		switch ref, h, err := s.requestHolder(ctx, idKey, md.GetUid()); {
		case err != nil:
			return nil, nil, err
		case h == heldByOther:
			return nil, reusedRequest(requestID, md.GetName(), ref), nil
		case h == heldByUs:
			return nil, nil, nil
		}
		// Its pod is gone and requestHolder deleted the key: try again.
	}
}

// nameTaken is the outcome of a create whose pod key exists: our own pod
// (a redelivery), a pod of this request id under another uid (a replay),
// or another pod of the name.
func (s *Stage) nameTaken(ctx context.Context, pod *corev1.Pod, requestID string) (*corev1.Pod, *corev1.Status, error) {
	md := pod.GetMetadata()
	stored, err := objects.Get[*corev1.Pod](ctx, s.env.Store, md.GetNamespace(), md.GetName())
	switch {
	case err == nil && stored.GetMetadata().GetUid() == md.GetUid():
		return stored, nil, nil
	case err == nil && stored.GetMetadata().GetAnnotations()[stage.AnnotationRequestID] == requestID:
		other := &corev1.ObjectReference{Namespace: md.GetNamespace(), Name: md.GetName(), Uid: stored.GetMetadata().GetUid()}
		return nil, reusedRequest(requestID, md.GetName(), other), nil
	case err == nil || errors.Is(err, raftstore.ErrNotFound):
		return nil, stage.AlreadyExists("pods", md.GetName()), nil
	default:
		return nil, nil, err
	}
}

// holder says whose a request id's key is.
type holder int

const (
	heldByNone  holder = iota // no key now (deleted, its pod gone)
	heldByUs                  // our pod's: stored once, deleted since
	heldByOther               // another stored pod's
)

// requestHolder reads idKey and the pod it names. A key whose pod is no
// longer stored with its uid it deletes, at the revision it read
// (heldByNone: the caller tries again).
func (s *Stage) requestHolder(ctx context.Context, idKey, uid string) (*corev1.ObjectReference, holder, error) {
	kv, err := s.env.Store.KV().Get(ctx, idKey)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil, heldByNone, nil
	}
	if err != nil {
		return nil, 0, err
	}
	ref := &corev1.ObjectReference{}
	if err := proto.Unmarshal(kv.Value, ref); err != nil {
		return nil, 0, bus.Permanent(fmt.Errorf("request id key %s: %w", idKey, err))
	}
	if ref.GetUid() == uid {
		return ref, heldByUs, nil
	}
	switch live, err := s.holds(ctx, ref); {
	case err != nil:
		return nil, 0, err
	case live:
		return ref, heldByOther, nil
	}
	if _, err := s.env.Store.KV().Delete(ctx, idKey, kv.ModRevision); err != nil && !errors.Is(err, raftstore.ErrConflict) && !errors.Is(err, raftstore.ErrNotFound) {
		return nil, 0, err
	}
	return ref, heldByNone, nil
}

// holds reports whether the pod ref names is stored with ref's uid.
func (s *Stage) holds(ctx context.Context, ref *corev1.ObjectReference) (bool, error) {
	p, err := objects.Get[*corev1.Pod](ctx, s.env.Store, ref.GetNamespace(), ref.GetName())
	if errors.Is(err, raftstore.ErrNotFound) {
		return false, nil
	}
	return err == nil && p.GetMetadata().GetUid() == ref.GetUid(), err
}

// Reconcile deletes the request id keys whose pods are gone, when
// Config.RequestIDSweep has passed since the last sweep that completed:
// each key written at or before the revision of a list of the stored pods
// that does not hold its pod (a pod is created with its key, so it would
// be in that list), at the revision it was read at.
func (s *Stage) Reconcile(ctx context.Context) error {
	now := s.cfg.Now()
	s.mu.Lock()
	due := s.lastSweep.IsZero() || now.Sub(s.lastSweep) >= s.cfg.RequestIDSweep
	s.mu.Unlock()
	if !due {
		return nil
	}
	if err := s.sweep(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.lastSweep = now
	s.mu.Unlock()
	return nil
}

func (s *Stage) sweep(ctx context.Context) error {
	pods, rev, err := s.env.Store.KV().List(ctx, objects.Pods.Prefix(""))
	if err != nil {
		return err
	}
	live := make(map[string]bool, len(pods))
	for _, kv := range pods {
		p := &corev1.Pod{}
		if err := objects.DecodeMeta(kv, p); err != nil { // the uid alone: no full decode of every pod
			return err
		}
		live[p.GetMetadata().GetUid()] = true
	}
	kvs, _, err := s.env.Store.KV().List(ctx, pipeline.RequestIDPrefix)
	if err != nil {
		return err
	}
	var errs []error
	for _, kv := range kvs {
		ref := &corev1.ObjectReference{}
		if kv.ModRevision > rev || proto.Unmarshal(kv.Value, ref) != nil || live[ref.GetUid()] {
			continue
		}
		if _, err := s.env.Store.KV().Delete(ctx, kv.Key, kv.ModRevision); err != nil && !errors.Is(err, raftstore.ErrConflict) && !errors.Is(err, raftstore.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

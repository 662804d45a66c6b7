package controller

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// Sentinel errors of the package.
var (
	// ErrUncertain: a pod creation got no answer in time; it may still be
	// created (the caller keeps its name pending and asks again).
	ErrUncertain = errors.New("controller: no answer to the pod creation")
	// ErrNameTaken: the pod's name is another pod's (409 AlreadyExists), or
	// this request's pod is already stored (409 Conflict on its request).
	ErrNameTaken = errors.New("controller: the pod name is taken")
)

// StatusError is a pod creation the pipeline refused, with its Status
// (403 Forbidden, 422 Invalid, 429 TooManyRequests, ...).
type StatusError struct{ Status *corev1.Status }

func (e *StatusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status.GetCode(), e.Status.GetReason(), e.Status.GetMessage())
}

// Requester sends a request and waits for its answer: core NATS in
// production (NATSRequester), a fake in unit tests. Safe for concurrent
// use.
type Requester interface {
	Request(ctx context.Context, subject string, data []byte) ([]byte, error)
}

type natsRequester struct{ nc *nats.Conn }

// NATSRequester returns the Requester of a NATS connection.
func NATSRequester(nc *nats.Conn) Requester { return natsRequester{nc} }

func (r natsRequester) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	m, err := r.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// Pods creates and deletes a controller's pods. A pod is created through
// the pipeline, as a user's is: the controller asks the api stage on
// pipeline.ControllerPodsSubject(stage) — a subject only the stage's bus
// identity may publish to, so the api stage knows who asks — and the api
// stage publishes the PodRequested (produced by the controller's stage and
// replica, so `podflow trace` shows the controller's step first) that
// travels admission and persistence; persistence answers. The pod's name
// is the idempotency key: persistence creates it only if absent, so a
// creation asked twice (a retry, two replicas during a handover) makes
// one pod.
type Pods struct {
	env     stage.Env
	req     Requester
	Timeout time.Duration // per creation (default 30s)
}

// NewPods returns the Pods of a controller stage replica.
func NewPods(env stage.Env, req Requester) *Pods {
	return &Pods{env: env, req: req, Timeout: 30 * time.Second}
}

// Create creates pod (its name, namespace and owner references set) and
// returns it as stored, with its resourceVersion: the revision the
// controller's informers must reach to see it (Runner.Expect). started is
// when the sync that decided it began (the controller's step in the
// trace). A creation refused is a *StatusError; a name already taken
// ErrNameTaken; no answer in time ErrUncertain.
func (p *Pods) Create(ctx context.Context, pod *corev1.Pod, started time.Time) (*corev1.Pod, error) {
	obj, err := p.create(ctx, pod, started)
	if err != nil {
		return nil, err
	}
	out := &corev1.Pod{}
	if err := vt.Unmarshal(obj, out); err != nil {
		md := pod.GetMetadata()
		return nil, fmt.Errorf("create pod %s/%s: decode the pod: %w", md.GetNamespace(), md.GetName(), err)
	}
	return out, nil
}

// CreateRevision is Create for a caller that needs only the revision the
// pod was stored at (its resourceVersion): it decodes the metadata of the
// answer's pod, not the pod. A ReplicaSet's sync needs nothing else of the
// pods it creates, and decoding each whole took 8 % of its stage's CPU.
func (p *Pods) CreateRevision(ctx context.Context, pod *corev1.Pod, started time.Time) (int64, error) {
	obj, err := p.create(ctx, pod, started)
	if err != nil {
		return 0, err
	}
	md, err := decodePodMeta(obj)
	if err != nil {
		return 0, fmt.Errorf("create pod %s/%s: decode the pod: %w", pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName(), err)
	}
	return objects.Revision(&corev1.Pod{Metadata: md}), nil
}

// decodePodMeta decodes the metadata of an encoded Pod, as vt.Unmarshal
// of the Pod would: every occurrence of its field 1, merged in order (a
// message field written twice is the merge of both). The other fields
// are only stepped over, not checked: the answer's pod is the one the
// persistence stage stored, which vt.Marshal encoded.
func decodePodMeta(b []byte) (*corev1.ObjectMeta, error) {
	var meta []byte
	err := vt.EachBytesField(b, func(num protowire.Number, v []byte) error {
		if num == 1 {
			meta = protowire.AppendBytes(protowire.AppendTag(meta, 1, protowire.BytesType), v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// meta is a Pod holding only its metadata field(s): decoding it
	// merges them as decoding the whole pod does.
	only := &corev1.Pod{}
	if err := vt.Unmarshal(meta, only); err != nil {
		return nil, err
	}
	return only.GetMetadata(), nil
}

// create asks for pod's creation and returns the encoded pod as stored.
func (p *Pods) create(ctx context.Context, pod *corev1.Pod, started time.Time) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	md := pod.GetMetadata()
	now := timestamppb.Now()
	e := &eventsv1.Envelope{
		RequestId: uuid.NewString(), Namespace: md.GetNamespace(), PodName: md.GetName(),
		Time: now, Stage: p.env.Stage, Replica: p.env.Replica, Attempt: 1, Traceparent: bus.NewTraceparent(),
		HandledStart: timestamppb.New(started), HandledEnd: now,
		Payload: &eventsv1.Envelope_PodRequested{PodRequested: &eventsv1.PodRequested{Pod: pod}},
	}
	data, err := vt.Marshal(e)
	if err != nil {
		return nil, err
	}
	b, err := p.req.Request(ctx, pipeline.ControllerPodsSubject(p.env.Stage), data)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: pod %s/%s: %v", ErrUncertain, md.GetNamespace(), md.GetName(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
	resp := &apiv1.Response{}
	if err := vt.Unmarshal(b, resp); err != nil {
		return nil, fmt.Errorf("create pod %s/%s: decode the answer: %w", md.GetNamespace(), md.GetName(), err)
	}
	st := resp.GetStatus()
	switch {
	case st.GetCode() == 409:
		return nil, fmt.Errorf("%w: pod %s/%s: %s", ErrNameTaken, md.GetNamespace(), md.GetName(), st.GetMessage())
	case st.GetStatus() == "Failure" || st.GetCode() >= 300:
		return nil, &StatusError{Status: st}
	}
	return resp.GetObject(), nil
}

// Delete starts the graceful deletion of a controller's pod (as kube's
// controllers delete, with the pod's own grace period) and returns it as
// marked terminating. A pod gone already is raftstore.ErrNotFound.
func (p *Pods) Delete(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return stage.DeletePod(ctx, p.env, ns, name, nil)
}

// MaxGeneratedNameLength bounds the base of a generated pod name, as
// kube's name generator does (63 minus the 5 characters it appends).
const MaxGeneratedNameLength = 58

// alphabet is Kubernetes' generated-name alphabet (no vowels, no
// look-alikes).
const alphabet = "bcdfghjklmnpqrstvwxz2456789"

// PodName returns the name of the pod in slot ordinal of the controller
// object with uid: base (truncated to MaxGeneratedNameLength) and five
// characters derived from (uid, ordinal). Every replica derives the same
// name for a slot, so a creation asked twice names one pod. Names of two
// slots may collide; a caller skips a slot whose name is taken.
func PodName(base, uid string, ordinal int) string {
	if len(base) > MaxGeneratedNameLength {
		base = base[:MaxGeneratedNameLength]
	}
	sum := sha256.Sum256([]byte(uid + "/" + strconv.Itoa(ordinal)))
	v := binary.BigEndian.Uint64(sum[:8])
	b := make([]byte, 5)
	for i := range b {
		b[i] = alphabet[v%uint64(len(alphabet))]
		v /= uint64(len(alphabet))
	}
	return base + string(b)
}

// FreeNames returns n names of slots of the object with uid whose names
// taken does not hold, lowest slots first; pending names (asked, outcome
// unknown) are not free.
func FreeNames(base, uid string, n int, taken func(name string) bool) []string {
	return freeNames(func(ord int) string { return PodName(base, uid, ord) }, n, taken)
}

func freeNames(name func(ord int) string, n int, taken func(name string) bool) []string {
	out := make([]string, 0, n)
	seen := make(map[string]bool, n)
	for ord := 0; len(out) < n; ord++ {
		name := name(ord)
		if seen[name] || taken(name) {
			continue
		}
		seen[name] = true
		out = append(out, name)
	}
	return out
}

// SlotNames is FreeNames for a controller that names an object's pods
// again and again (a ReplicaSet growing to 10,000 pods over 20 syncs
// looks at every slot from the lowest on each): it keeps the names of the
// slots it derived, for one base and uid (Reset). It is not safe for
// concurrent use.
type SlotNames struct {
	base, uid string
	names     []string
}

// Free is FreeNames(base, uid, n, taken) for the base and uid of the
// last Reset.
func (s *SlotNames) Free(n int, taken func(name string) bool) []string {
	return freeNames(s.name, n, taken)
}

// Reset makes s name the slots of base and uid, keeping the names it
// holds if they are its.
func (s *SlotNames) Reset(base, uid string) {
	if s.base != base || s.uid != uid {
		*s = SlotNames{base: base, uid: uid}
	}
}

func (s *SlotNames) name(ord int) string {
	for len(s.names) <= ord {
		s.names = append(s.names, PodName(s.base, s.uid, len(s.names)))
	}
	return s.names[ord]
}

// PodFromTemplate makes the pod of a controller's template, as kube's
// controller.GetPodFromTemplate: the template's labels, annotations,
// finalizers and spec, the controller's reference as its owner, in
// namespace ns. The name is the caller's (PodName). A template with
// fields podflow does not run is refused (manifest.ErrUnsupportedField).
func PodFromTemplate(ns string, tmpl *v1.PodTemplateSpec, owner *metav1.OwnerReference) (*corev1.Pod, error) {
	kp := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Labels: tmpl.Labels, Annotations: tmpl.Annotations, Finalizers: tmpl.Finalizers},
		Spec:       *tmpl.Spec.DeepCopy(),
	}
	if owner != nil {
		kp.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	m, err := manifest.FromKube(kp)
	if err != nil {
		return nil, err
	}
	pod, ok := m.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("controller: a pod template converts to %T", m)
	}
	objects.Meta(pod).Namespace = ns
	return pod, nil
}

// Package api is the api stage: podflow's front door on the bus. It takes
// pod creations (PodRequested, as request-reply on pipeline.CreatePodSubject
// or fire-and-forget on the events stream) and object requests (apply and
// delete of every kind, on pipeline.ObjectSubject), authenticates the
// bearer token (a static token file and ServiceAccount token Secrets) and
// authorizes with RBAC from the store. A pod creation continues as
// PodAuthorized to admission, or ends as PodRejected with Unauthorized or
// Forbidden — the seed's failure 1.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/validate"
)

// Config configures the api stage.
type Config struct {
	// TokenFile is a kube-apiserver --token-auth-file (CSV); empty means
	// ServiceAccount tokens only.
	TokenFile string
	Authn     auth.AuthenticatorConfig
	RBAC      auth.RBACConfig
	// Workers serve the request-reply subjects.
	Workers int
	// HTTPS, when set, runs the Kubernetes REST front door (see https.go
	// and services/apiserver) in this replica.
	HTTPS *apiserver.Config
	// EventsHighWater is the fraction of PODFLOW_EVENTS' MaxBytes past
	// which new pods are refused (429 TooManyRequests), keeping the rest
	// for the events of pods already accepted (pressure.go). Default 0.9;
	// 1 refuses only at a full stream.
	EventsHighWater float64
	// EventsInfoInterval is how long one read of the stream's size is
	// used. Default 1s.
	EventsInfoInterval time.Duration
	// UserPodQPS and UserPodBurst are each user's token bucket of pod
	// creations (429 TooManyRequests past it; system:masters exempt).
	// Default 100 per second, burst 200; UserPodQPS 0 disables it.
	UserPodQPS   float64
	UserPodBurst int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Authn: auth.DefaultAuthenticatorConfig(), RBAC: auth.DefaultRBACConfig(), Workers: 16,
		EventsHighWater: DefaultEventsHighWater, EventsInfoInterval: DefaultEventsInfoInterval,
		UserPodQPS: DefaultUserPodQPS, UserPodBurst: DefaultUserPodBurst,
	}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("api: Workers (%d) must be at least 1", c.Workers)
	}
	if err := c.Authn.Validate(); err != nil {
		return err
	}
	if err := c.validateBackpressure(); err != nil {
		return err
	}
	if c.HTTPS != nil {
		if err := c.HTTPS.Validate(); err != nil {
			return err
		}
	}
	return c.RBAC.Validate()
}

// Stage is one replica of the api stage.
type Stage struct {
	env   stage.Env
	cfg   Config
	authn *auth.TokenAuthenticator
	rbac  *auth.RBAC

	replies *replyMux // HTTPS pod creations wait on it

	events  *eventsGauge // PODFLOW_EVENTS' fill, read by Start's connection
	limiter *userLimiter // pod creations per user
}

var _ stage.Handler = (*Stage)(nil)
var _ stage.Starter = (*Stage)(nil)

// New returns an api stage replica.
func New(env stage.Env, cfg Config) (*Stage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var static []auth.StaticToken
	if cfg.TokenFile != "" {
		f, err := os.Open(cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("api: token file: %w", err)
		}
		static, err = auth.ParseTokenFile(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("api: token file %q: %w", cfg.TokenFile, err)
		}
	}
	authn, err := auth.NewTokenAuthenticator(cfg.Authn, static)
	if err != nil {
		return nil, err
	}
	rbac, err := auth.NewRBAC(cfg.RBAC)
	if err != nil {
		return nil, err
	}
	return &Stage{
		env: env, cfg: cfg, authn: authn, rbac: rbac,
		events:  &eventsGauge{interval: cfg.EventsInfoInterval, highWater: cfg.EventsHighWater},
		limiter: newUserLimiter(cfg.UserPodQPS, cfg.UserPodBurst),
	}, nil
}

// Start feeds the RBAC and token caches from the store and serves the
// request-reply subjects; it returns once the caches are synced.
func (s *Stage) Start(ctx context.Context, g *errgroup.Group) error {
	if s.env.NATS != nil && s.events.read == nil {
		js, err := jetstream.New(s.env.NATS)
		if err != nil {
			return fmt.Errorf("api: jetstream: %w", err)
		}
		s.events.read = jetStreamUsage(js)
	}
	if err := s.startCaches(ctx, g); err != nil {
		return err
	}
	if err := s.serve(ctx, g, pipeline.CreatePodSubject, s.onCreatePod); err != nil {
		return err
	}
	if err := s.serve(ctx, g, pipeline.ObjectSubject, s.onObject); err != nil {
		return err
	}
	if s.cfg.HTTPS != nil {
		return s.startHTTPS(ctx, g)
	}
	return nil
}

// startCaches runs the informers feeding the RBAC and token caches and
// returns once they are synced.
func (s *Stage) startCaches(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	up := func(o proto.Message) { _ = s.rbac.Upsert(o) }
	del := func(o proto.Message) { _ = s.rbac.Delete(o) }
	secretUp := func(o proto.Message) { s.authn.UpsertSecret(o.(*corev1.Secret)) }
	secretDel := func(o proto.Message) {
		md := o.(*corev1.Secret).GetMetadata()
		s.authn.DeleteSecret(md.GetNamespace(), md.GetName())
	}
	if err := errors.Join(
		feed[*corev1.Role](&infs, s.env.Store, up, del),
		feed[*corev1.ClusterRole](&infs, s.env.Store, up, del),
		feed[*corev1.RoleBinding](&infs, s.env.Store, up, del),
		feed[*corev1.ClusterRoleBinding](&infs, s.env.Store, up, del),
		feed[*corev1.Secret](&infs, s.env.Store, secretUp, secretDel),
	); err != nil {
		return err
	}
	return infs.Start(ctx, g)
}

// feed adds to infs an informer for T feeding up/del.
func feed[T objects.Object](infs *informer.Group, st *objects.Store, up, del func(proto.Message)) error {
	inf, err := informer.New[T](st, "", informer.Handlers[T]{
		OnAdd:    func(o T) { up(o) },
		OnUpdate: func(_, o T) { up(o) },
		OnDelete: func(o T) { del(o) },
	})
	if err != nil {
		return err
	}
	infs.Add(inf)
	return nil
}

// serve answers requests on subject with cfg.Workers goroutines of a queue
// group shared by every api replica.
func (s *Stage) serve(ctx context.Context, g *errgroup.Group, subject string, h func(context.Context, *nats.Msg)) error {
	ch := make(chan *nats.Msg, 4*s.cfg.Workers)
	sub, err := s.env.NATS.ChanQueueSubscribe(subject, pipeline.API, ch)
	if err != nil {
		return fmt.Errorf("api: subscribe %q: %w", subject, err)
	}
	g.Go(func() error {
		<-ctx.Done()
		return sub.Unsubscribe()
	})
	for range s.cfg.Workers {
		g.Go(func() error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case m := <-ch:
					h(ctx, m)
				}
			}
		})
	}
	return nil
}

func (s *Stage) reply(m *nats.Msg, st *corev1.Status, obj proto.Message) {
	_ = stage.Reply(s.env, m.Reply, st, obj)
}

// onCreatePod turns a request-reply pod creation into a PodRequested event
// on the stream; whichever stage ends the request answers the requester.
func (s *Stage) onCreatePod(ctx context.Context, m *nats.Msg) {
	req := &eventsv1.PodRequested{}
	if err := proto.Unmarshal(m.Data, req); err != nil {
		s.reply(m, stage.Failure(400, eventsv1.ReasonBadRequest, "pods", "", "decode PodRequested: %v", err), nil)
		return
	}
	req.ReplyTo = m.Reply
	req.User = nil // only trusted front doors may assert a user
	env := &eventsv1.Envelope{
		RequestId:   uuid.NewString(),
		Namespace:   req.GetPod().GetMetadata().GetNamespace(),
		PodName:     req.GetPod().GetMetadata().GetName(),
		Time:        timestamppb.Now(),
		Stage:       "client",
		Replica:     s.env.Replica,
		Attempt:     1,
		Traceparent: bus.NewTraceparent(),
		Payload:     &eventsv1.Envelope_PodRequested{PodRequested: req},
	}
	env.Namespace = podrules.NamespaceOrDefault(env.Namespace)
	if st := s.events.check(ctx, env.PodName); st != nil { // before it takes room in the stream
		s.reply(m, st, nil)
		return
	}
	if err := s.env.Pub.Publish(ctx, env); err != nil {
		s.reply(m, stage.Failure(503, "ServiceUnavailable", "pods", env.PodName, "publish PodRequested: %v", err), nil)
	}
}

// Handle authenticates and authorizes a PodRequested.
func (s *Stage) Handle(ctx context.Context, d *bus.Delivery) error {
	req := d.Envelope.GetPodRequested()
	if req == nil {
		return bus.Permanent(fmt.Errorf("api: unexpected event %s", d.Envelope.Type()))
	}
	if d.Envelope.RequestId == "" {
		d.Envelope.RequestId = d.Envelope.GetId()
	}
	pod := proto.CloneOf(req.GetPod())
	if pod == nil {
		pod = &corev1.Pod{}
	}
	md := objects.Meta(pod)
	md.Namespace = podrules.NamespaceOrDefault(md.Namespace)
	if md.Name == "" && md.GenerateName != "" {
		md.Name = md.GenerateName + suffix(d.Envelope.RequestId)
	}
	d.Envelope.Namespace, d.Envelope.PodName = md.Namespace, md.Name

	user, st := s.authn.AuthenticateToken(req.GetToken())
	if st == nil {
		st = s.rbac.Check(auth.Attributes{User: user, Verb: "create", Namespace: md.Namespace, Resource: "pods"})
	}
	if st == nil {
		st = s.admitPod(ctx, user, md.Name)
	}
	if st != nil {
		st.Kind, st.Name = "pods", md.Name
		return stage.Reject(ctx, s.env, d, st, req.GetReplyTo())
	}
	next := d.Next(&eventsv1.PodAuthorized{Pod: pod, User: user, ReplyTo: req.GetReplyTo(), DryRun: req.GetDryRun()})
	return s.env.Pub.Publish(ctx, next)
}

// suffix is Kubernetes' generateName suffix, derived from the request so
// that a redelivery names the pod alike.
func suffix(requestID string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	id := uuid.NewSHA1(uuid.NameSpaceOID, []byte(requestID))
	var b strings.Builder
	for i := range 5 {
		b.WriteByte(alphabet[int(id[i])%len(alphabet)])
	}
	return b.String()
}

// onObject serves apply and delete of objects.
func (s *Stage) onObject(ctx context.Context, m *nats.Msg) {
	req := &apiv1.ObjectRequest{}
	if err := proto.Unmarshal(m.Data, req); err != nil {
		s.reply(m, stage.Failure(400, eventsv1.ReasonBadRequest, "", "", "decode ObjectRequest: %v", err), nil)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, obj := s.object(ctx, req)
	s.reply(m, st, obj)
}

func (s *Stage) object(ctx context.Context, req *apiv1.ObjectRequest) (*corev1.Status, proto.Message) {
	user, st := s.authn.AuthenticateToken(req.GetToken())
	if st != nil {
		return st, nil
	}
	return s.objectAs(ctx, user, req)
}

// objectAs serves req for an authenticated user (req.User is ignored: the
// bus path authenticates the token; the HTTPS path passes its user in
// process).
func (s *Stage) objectAs(ctx context.Context, user *corev1.UserInfo, req *apiv1.ObjectRequest) (*corev1.Status, proto.Message) {
	kind, err := objects.KindForResource(req.GetKind())
	if err != nil {
		return stage.Failure(404, eventsv1.ReasonNotFound, req.GetKind(), req.GetName(), "the server doesn't have a resource type %q", req.GetKind()), nil
	}
	ns := req.GetNamespace()
	if kind.Namespaced {
		ns = podrules.NamespaceOrDefault(ns)
	}
	if !kind.Namespaced {
		ns = ""
	}
	attrs := auth.Attributes{User: user, Namespace: ns, APIGroup: kind.APIGroup, Resource: kind.Resource, Name: req.GetName()}
	switch req.GetVerb() {
	case "delete":
		attrs.Verb = "delete"
		if st := s.rbac.Check(attrs); st != nil {
			return st, nil
		}
		if kind.Name == objects.Pods.Name {
			return s.deletePod(ctx, ns, req.GetName(), req.GracePeriodSeconds)
		}
		if _, err := s.env.Store.Delete(ctx, kind, ns, req.GetName(), 0); errors.Is(err, raftstore.ErrNotFound) {
			return stage.NotFound(kind.Resource, req.GetName()), nil
		} else if err != nil {
			return stage.Internal(err), nil
		}
		return stage.Success(200, kind.Resource, req.GetName()), nil
	case "create", "apply":
		obj := kind.New()
		if err := proto.Unmarshal(req.GetObject(), obj); err != nil {
			return stage.Failure(400, eventsv1.ReasonBadRequest, kind.Resource, "", "decode %s: %v", kind.Name, err), nil
		}
		md := objects.Meta(obj)
		md.Namespace = ns
		if md.GetName() == "" {
			return stage.Failure(422, eventsv1.ReasonInvalid, kind.Resource, "", "%s is invalid: metadata.name: Required value", kind.Name), nil
		}
		attrs.Name = md.GetName()
		if kind.Name == objects.Pods.Name {
			return stage.Failure(400, eventsv1.ReasonBadRequest, "pods", md.GetName(), "pods are created through %s", pipeline.CreatePodSubject), nil
		}
		return s.apply(ctx, kind, obj, attrs, req.GetVerb() == "create")
	}
	return stage.Failure(405, "MethodNotAllowed", kind.Resource, req.GetName(), "verb %q is not supported", req.GetVerb()), nil
}

// apply creates obj, or replaces it when it exists and createOnly is false.
func (s *Stage) apply(ctx context.Context, kind objects.Kind, obj objects.Object, attrs auth.Attributes, createOnly bool) (*corev1.Status, proto.Message) {
	md := obj.GetMetadata()
	existing, err := s.env.Store.GetKind(ctx, kind, md.GetNamespace(), md.GetName())
	exists := err == nil
	if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		return stage.Internal(err), nil
	}
	attrs.Verb = "create"
	if exists {
		if createOnly {
			return stage.AlreadyExists(kind.Resource, md.GetName()), nil
		}
		attrs.Verb = "update"
	}
	if st := s.rbac.Check(attrs); st != nil {
		return st, nil
	}
	if st := validate.Object(obj); st != nil { // names, ConfigMap and Secret sizes
		return st, nil
	}
	now := timestamppb.Now()
	if exists {
		prev := existing.GetMetadata()
		md.Uid, md.CreationTimestamp = prev.GetUid(), prev.GetCreationTimestamp()
		md.Generation = prev.GetGeneration() + 1
	} else {
		md.Uid, md.CreationTimestamp, md.Generation = uuid.NewString(), now, 1
	}
	if sec, ok := obj.(*corev1.Secret); ok {
		fillServiceAccountToken(sec)
	}
	if exists {
		objects.SetRevision(obj, objects.Revision(existing))
		_, err = s.env.Store.Update(ctx, obj)
	} else {
		_, err = s.env.Store.Create(ctx, obj)
	}
	if errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrAlreadyExists) {
		return stage.Failure(409, eventsv1.ReasonConflict, kind.Resource, md.GetName(),
			"Operation cannot be fulfilled on %s %q: the object has been modified; please apply your changes to the latest version and try again", kind.Resource, md.GetName()), nil
	}
	if err != nil {
		return stage.Internal(err), nil
	}
	code := int32(201)
	if exists {
		code = 200
	}
	return stage.Success(code, kind.Resource, md.GetName()), obj
}

// fillServiceAccountToken issues a token for a ServiceAccount token Secret
// that has none, as Kubernetes' token controller does.
func fillServiceAccountToken(sec *corev1.Secret) {
	if sec.GetType() != "kubernetes.io/service-account-token" || len(sec.GetData()["token"]) > 0 {
		return
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	sec.Data["token"] = []byte(hex.EncodeToString(b))
}

// deletePod starts a pod's graceful deletion: it marks the pod terminating
// in the store, then hands it to its node (PodDeleteRequested), or, for a
// pod no node has, removes it at once (PodDeleted).
func (s *Stage) deletePod(ctx context.Context, ns, name string, grace *int64) (*corev1.Status, proto.Message) {
	now := timestamppb.Now()
	pod, err := objects.Mutate(ctx, s.env.Store, ns, name, func(p *corev1.Pod) error {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			return objects.ErrNoChange
		}
		g := int64(30)
		if p.GetSpec().TerminationGracePeriodSeconds != nil {
			g = p.GetSpec().GetTerminationGracePeriodSeconds()
		}
		if grace != nil {
			g = *grace
		}
		p.Metadata.DeletionTimestamp = now
		p.Metadata.DeletionGracePeriodSeconds = proto.Int64(g)
		return nil
	})
	if errors.Is(err, raftstore.ErrNotFound) {
		return stage.NotFound("pods", name), nil
	}
	if err != nil {
		return stage.Internal(err), nil
	}
	if err := RequestDeletion(ctx, s.env, pod); err != nil {
		return stage.Internal(err), nil
	}
	return stage.Success(200, "pods", name), pod
}

// RequestDeletion continues the deletion of a pod marked terminating: an
// unbound pod is removed from the store at once (PodDeleted); a bound pod
// is handed to its node (PodDeleteRequested). It is idempotent and is also
// what reconciliation calls for a terminating pod.
func RequestDeletion(ctx context.Context, env stage.Env, pod *corev1.Pod) error {
	md := pod.GetMetadata()
	base := &eventsv1.Envelope{
		PodUid: md.GetUid(), Namespace: md.GetNamespace(), PodName: md.GetName(), NodeName: pod.GetSpec().GetNodeName(),
		Time: timestamppb.Now(), Stage: env.Stage, Replica: env.Replica, Attempt: 1, Generation: md.GetGeneration(),
		Traceparent: bus.NewTraceparent(),
	}
	if pod.GetSpec().GetNodeName() == "" {
		rev, err := env.Store.Delete(ctx, objects.Pods, md.GetNamespace(), md.GetName(), objects.Revision(pod))
		if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			return err
		}
		base.Payload = &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{Revision: rev}}
	} else {
		base.Payload = &eventsv1.Envelope_PodDeleteRequested{PodDeleteRequested: &eventsv1.PodDeleteRequested{
			GracePeriodSeconds: md.DeletionGracePeriodSeconds,
		}}
	}
	return env.Pub.Publish(ctx, base)
}

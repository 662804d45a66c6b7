// Package api is the api stage: podflow's front door on the bus. It takes
// pod creations (PodRequested, as request-reply on pipeline.CreatePodSubject
// or fire-and-forget on the events stream) and object requests (apply and
// delete of every kind, on pipeline.ObjectSubject), authenticates the
// bearer token (a static token file, ServiceAccount token Secrets and, with
// Config.Authn.BoundTokens, bound ServiceAccount tokens) and authorizes with
// RBAC from the store. A pod creation continues as PodAuthorized to
// admission, or ends as PodRejected with Unauthorized or Forbidden — the
// seed's failure 1.
//
// The stage is also the Backend of the HTTPS front door (backend.go): the
// api process runs services/apiserver's FrontDoor and NodeTokens and the
// namespace controller (services/stages/namespace) beside it
// (stage.Compose); the stage itself does none of that.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
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
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/sealed"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/validate"
	"github.com/podflow/podflow/services/webhook"
)

// Config configures the api stage.
type Config struct {
	// TokenFile is a kube-apiserver --token-auth-file (CSV); empty means
	// ServiceAccount tokens only.
	TokenFile string
	Authn     auth.AuthenticatorConfig
	RBAC      auth.RBACConfig
	// Workers serve the request-reply subjects; ControllerWorkers the
	// controllers' pod requests (controllers.go), which come in bursts of
	// hundreds (default 256).
	Workers           int
	ControllerWorkers int
	// TokenWorkers serve node agents' projected token requests
	// (apiserver.NodeTokens), which come in bursts of hundreds when pods
	// are bound faster than nodes start them (default 256).
	TokenWorkers int
	// SealKey, when set, is the key bearer tokens on the bus are sealed
	// to (see sealing.go): the stream then never holds one in clear, and
	// a PodRequested with a token in clear is refused. Nil: tokens travel
	// in clear (unit tests).
	SealKey *sealed.Key
	// Services allocates Services' ClusterIPs (the service CIDR).
	Services ipalloc.Config
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
	// MaxPodRequestBytes bounds a pod creation request on the bus (413
	// past it, before it is decoded). Default 3 MiB, kube-apiserver's
	// request body limit; 0 disables it.
	MaxPodRequestBytes int
	// UserEventsShare bounds the part of PODFLOW_EVENTS one user's pod
	// creations may hold (intake.go): 429 past it. Default 0.1; 0
	// disables it. system:masters is exempt.
	UserEventsShare float64
	// NamespaceDeleted, when set, is called with each namespace a DELETE
	// marked (the namespace controller's Enqueue: its pass starts at
	// once). Nil: the controller finds it through its informer.
	NamespaceDeleted func(name string)
	// Registry prepares writes of generic kinds (generic.go); nil: they
	// are refused.
	Registry Registry
	// SyncKinds, when set, is called when a request names a kind this
	// process does not know, before it is refused: the CRD catalog's
	// Sync, for a definition another replica has just accepted.
	SyncKinds func(context.Context) error
	// Webhooks, when set, runs the admission webhooks and policies on
	// every write of an object (services/webhook/kube): mutating before
	// validation, validating after, as kube-apiserver; nil: none.
	Webhooks webhook.Admitter
	// Quota charges writes to the namespace's ResourceQuotas before they
	// are stored (services/quota's *Admission, which links
	// k8s.io/kubernetes). Nil: ResourceQuotas are not enforced.
	Quota Quota
}

// Quota is ResourceQuota admission (services/quota.Admission): Admit
// charges the write of obj (op "CREATE", or "UPDATE" with old the stored
// object) to the quotas of its namespace, or refuses it (kube's 403
// "exceeded quota: ...").
type Quota interface {
	Admit(ctx context.Context, user *corev1.UserInfo, kind objects.Kind, op string, obj, old objects.Object) *corev1.Status
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Authn: auth.DefaultAuthenticatorConfig(), RBAC: auth.DefaultRBACConfig(), Workers: 16, ControllerWorkers: 256, TokenWorkers: 256,
		Services:        ipalloc.DefaultConfig(),
		EventsHighWater: DefaultEventsHighWater, EventsInfoInterval: DefaultEventsInfoInterval,
		UserPodQPS: DefaultUserPodQPS, UserPodBurst: DefaultUserPodBurst,
		MaxPodRequestBytes: DefaultMaxPodRequestBytes, UserEventsShare: DefaultUserEventsShare,
	}
}

// Validate checks the Config.
func (c Config) Validate() error {
	if c.Workers < 1 || c.ControllerWorkers < 1 || c.TokenWorkers < 1 {
		return fmt.Errorf("api: Workers (%d), ControllerWorkers (%d) and TokenWorkers (%d) must be at least 1", c.Workers, c.ControllerWorkers, c.TokenWorkers)
	}
	if err := c.Authn.Validate(); err != nil {
		return err
	}
	if err := c.Services.Validate(); err != nil {
		return err
	}
	if err := c.validateBackpressure(); err != nil {
		return err
	}
	return c.RBAC.Validate()
}

// Stage is one replica of the api stage.
type Stage struct {
	env   stage.Env
	cfg   Config
	authn *auth.TokenAuthenticator
	rbac  *auth.RBAC
	alloc *ipalloc.Allocator // Services' ClusterIPs

	replies *replyMux // pod creations in process (CreatePod) wait on it

	events  *eventsGauge // PODFLOW_EVENTS' fill, read by Start's connection
	limiter *userLimiter // pod creations per user
	intake  *intake      // the bus intake's bounds per user (intake.go)

	namespaces *nslifecycle.Admission // NamespaceLifecycle

	// The informers the bound tokens' objects come from (tokencache.go),
	// made by New and run by Start.
	pods     *informer.Informer[*corev1.Pod]
	podsAt   revisionGate // the revision pods reflects, for WaitPods
	accounts *informer.Informer[*corev1.ServiceAccount]
	nodes    *informer.Informer[*corev1.Node]

	openerOnce sync.Once
	opener     *sealed.Opener // Config.SealKey's, remembering the tokens it opened (made on first use)
}

var (
	_ stage.Handler = (*Stage)(nil)
	_ stage.Starter = (*Stage)(nil)
)

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
	acfg := cfg.Authn
	if env.Store != nil {
		acfg.LookupServiceAccount = lookupServiceAccount(env.Store)
	}
	authn, err := auth.NewTokenAuthenticator(acfg, static)
	if err != nil {
		return nil, err
	}
	rbac, err := auth.NewRBAC(cfg.RBAC)
	if err != nil {
		return nil, err
	}
	alloc, err := ipalloc.New(cfg.Services)
	if err != nil {
		return nil, err
	}
	s := &Stage{
		env: env, cfg: cfg, authn: authn, rbac: rbac, alloc: alloc,
		events:  &eventsGauge{interval: cfg.EventsInfoInterval, highWater: cfg.EventsHighWater},
		limiter: newUserLimiter(cfg.UserPodQPS, cfg.UserPodBurst),
	}
	s.intake = newIntake(cfg, s.limiter)
	if err := s.newTokenCaches(); err != nil {
		return nil, err
	}
	if s.namespaces, err = nslifecycle.NewAdmission(env.Store, cfg.NamespaceDeleted); err != nil {
		return nil, err
	}
	return s, nil
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
		s.intake.limits = jetStreamLimits(js)
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
	if err := stage.Serve(ctx, g, s.env.NATS, pipeline.ControllerPodsPrefix+".*", pipeline.API, s.cfg.ControllerWorkers, s.onControllerPod); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	mux, err := newReplyMux(s.env.NATS)
	if err != nil {
		return err
	}
	s.replies = mux
	g.Go(func() error {
		<-ctx.Done()
		mux.close()
		return nil
	})
	return nil
}

// serviceAccountLookupTimeout bounds the store read of a ServiceAccount
// the token cache does not hold yet.
const serviceAccountLookupTimeout = 5 * time.Second

// lookupServiceAccount reads a ServiceAccount's uid from st, for a bound
// token whose account the informer-fed cache has not seen (yet).
func lookupServiceAccount(st *objects.Store) func(namespace, name string) (string, bool, error) {
	return func(namespace, name string) (string, bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), serviceAccountLookupTimeout)
		defer cancel()
		sa, err := objects.Get[*corev1.ServiceAccount](ctx, st, namespace, name)
		if errors.Is(err, raftstore.ErrNotFound) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		return sa.GetMetadata().GetUid(), true, nil
	}
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
	infs.Add(s.accounts, s.pods, s.nodes) // tokencache.go
	if err := infs.Start(ctx, g); err != nil {
		return err
	}
	return s.namespaces.Start(ctx, g)
}

// feed adds to infs an informer for T feeding up/del.
func feed[T objects.Object](infs *informer.Group, st *objects.Store, up, del func(proto.Message)) error {
	return add(infs, informer.New[T], st, up, del)
}

func add[T objects.Object](infs *informer.Group, newInf func(*objects.Store, string, informer.Handlers[T]) (*informer.Informer[T], error),
	st *objects.Store, up, del func(proto.Message)) error {
	inf, err := newInf(st, "", informer.Handlers[T]{
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
	if err := stage.Serve(ctx, g, s.env.NATS, subject, pipeline.API, s.cfg.Workers, h); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	return nil
}

func (s *Stage) reply(m *nats.Msg, st *corev1.Status, obj proto.Message) {
	_ = stage.Reply(s.env, m.Reply, st, obj)
}

// serviceInboxes start the inboxes of podflow's own identities (bus
// InboxPrefix of pipeline's stage, store and node roles): a client's reply
// subject must not point into them, or a stage would answer into another
// service's pending requests.
var serviceInboxes = []string{
	bus.InboxPrefix(pipeline.StageRole("")), // _INBOX.stage-
	bus.InboxPrefix(pipeline.RoleStore) + ".",
	bus.InboxPrefix(pipeline.NodeRolePrefix),
	bus.InboxPrefix(pipeline.SimNodesRolePrefix), // a simulated cluster's node agent
}

// checkClientReply returns nil when a reply subject a client chose may be
// answered before the requester is known (an error answer to a request
// that does not decode or authenticate): an inbox
// (stage.CheckReplySubject), and not a podflow identity's. Once the
// requester is authenticated, checkUserReply decides.
func checkClientReply(subject string) error {
	if err := stage.CheckReplySubject(subject); err != nil {
		return err
	}
	for _, p := range serviceInboxes {
		if strings.HasPrefix(subject, p) {
			return fmt.Errorf("%w: %q is a podflow service's inbox", stage.ErrReplySubject, subject)
		}
	}
	return nil
}

// checkUserReply returns nil when subject is an inbox of user's own: below
// bus.UserInbox(user) (the inboxes only user's own bus identity may read),
// or the bus admin's inboxes (the admin's CLI, which may use any user's
// token; only the bus admin reads them, and it may read every inbox
// anyway). The api stage answers an authenticated request only there, so
// no answer of one user's request goes into another user's inbox.
// (Core NATS does not tell the api stage which bus user published a
// request; the bus lets each user subscribe only to its own inbox, and
// this check binds the inbox to the API user of the request's token.)
func checkUserReply(subject string, user *corev1.UserInfo) error {
	if err := stage.CheckReplySubject(subject); err != nil {
		return err
	}
	if strings.HasPrefix(subject, bus.UserInbox(user.GetUsername())+".") {
		return nil
	}
	if strings.HasPrefix(subject, bus.InboxPrefix(bus.RoleAdmin)+".") {
		return nil
	}
	return fmt.Errorf("%w: %q is not an inbox of user %q (%s.>)", stage.ErrReplySubject, subject, user.GetUsername(), bus.UserInbox(user.GetUsername()))
}

// refuseReply logs a request whose reply subject is refused; the request
// is dropped unanswered.
func (s *Stage) refuseReply(subject string, m *nats.Msg, err error) {
	s.env.Log.Warn("request dropped: bad reply subject", "subject", subject, "reply", m.Reply, "err", err)
}

// onCreatePod is the bus intake of pod creations: a request-reply on
// pipeline.CreatePodSubject becomes a PodRequested event on the stream
// only once it is bounded and authenticated (intake.go): too large or
// undecodable requests, bad tokens, a reply subject that is not the
// requester's own inbox, a user past its share of the stream or its rate,
// and a stream past its high-water mark are refused here, before the
// stream; whichever stage ends an accepted request answers the requester.
func (s *Stage) onCreatePod(ctx context.Context, m *nats.Msg) {
	if err := checkClientReply(m.Reply); err != nil && m.Reply != "" {
		s.refuseReply(pipeline.CreatePodSubject, m, err)
		return
	}
	if st := s.intake.checkSize(len(m.Data)); st != nil {
		s.reply(m, st, nil)
		return
	}
	req := &eventsv1.PodRequested{}
	var err error
	if err = proto.Unmarshal(m.Data, req); err != nil {
		s.reply(m, stage.Failure(400, eventsv1.ReasonBadRequest, "pods", "", "decode PodRequested: %v", err), nil)
		return
	}
	name := req.GetPod().GetMetadata().GetName()
	token, st := s.openRequest(req.GetToken())
	var user *corev1.UserInfo
	if st == nil {
		user, st = s.authn.AuthenticateToken(token)
	}
	if st != nil {
		st.Kind, st.Name = "pods", name
		s.reply(m, st, nil)
		return
	}
	if m.Reply != "" {
		if err := checkUserReply(m.Reply, user); err != nil {
			s.refuseReply(pipeline.CreatePodSubject, m, err)
			return
		}
	}
	ns := podrules.NamespaceOrDefault(req.GetPod().GetMetadata().GetNamespace())
	if st := s.rbac.Check(auth.Attributes{User: user, Verb: "create", Namespace: ns, Resource: "pods"}); st != nil {
		st.Kind, st.Name = "pods", name
		s.reply(m, st, nil) // a user who may not create pods takes no room in the stream
		return
	}
	if st := s.intake.admit(ctx, user, name, len(m.Data)); st != nil {
		s.reply(m, st, nil)
		return
	}
	req.ReplyTo = m.Reply
	req.User = nil // only trusted front doors may assert a user
	if req.Token, err = s.sealForStream(req.GetToken()); err != nil {
		s.reply(m, stage.Internal(err), nil)
		return
	}
	env := &eventsv1.Envelope{
		RequestId:   uuid.NewString(),
		Namespace:   req.GetPod().GetMetadata().GetNamespace(),
		PodName:     name,
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
	pod := vt.Clone(req.GetPod())
	if pod == nil {
		pod = &corev1.Pod{}
	}
	md := objects.Meta(pod)
	md.Namespace = podrules.NamespaceOrDefault(md.Namespace)
	if md.Name == "" && md.GenerateName != "" {
		md.Name = md.GenerateName + suffix(d.Envelope.RequestId)
	}
	d.Envelope.Namespace, d.Envelope.PodName = md.Namespace, md.Name
	reply := req.GetReplyTo()
	// A user instead of a token: a request a front door authenticated (the
	// controller intake, controllers.go). Only the api stage and the admin
	// may publish PodRequested on the stream, so the user is theirs.
	trusted := req.GetUser() != nil && req.GetToken() == ""
	if reply != "" && !trusted {
		if err := checkClientReply(reply); err != nil {
			return s.refuseStreamReply(ctx, d, md.Name, reply, err)
		}
	}

	var user *corev1.UserInfo
	var st *corev1.Status
	if trusted {
		user = req.GetUser()
	} else {
		var token string
		if token, st = s.openFromStream(req.GetToken()); st == nil {
			user, st = s.authn.AuthenticateToken(token)
		}
	}
	if st == nil && reply != "" {
		if err := checkReplyOf(reply, user); err != nil {
			return s.refuseStreamReply(ctx, d, md.Name, reply, err)
		}
	}
	if st == nil {
		st = s.rbac.Check(auth.Attributes{User: user, Verb: "create", Namespace: md.Namespace, Resource: "pods"})
	}
	if st == nil {
		st = s.namespaces.Admit(ctx, md.Namespace, "pods", md.Name)
	}
	if st == nil {
		// The stream's fill; the user's share and rate were bounded at the
		// intake (onCreatePod), or the admin published it.
		st = s.events.check(ctx, md.Name)
	}
	if st != nil {
		st.Kind, st.Name = "pods", md.Name
		return stage.Reject(ctx, s.env, d, st, req.GetReplyTo())
	}
	md.Uid = PodUID(d)
	next := d.Next(&eventsv1.PodAuthorized{Pod: pod, User: user, ReplyTo: req.GetReplyTo(), DryRun: req.GetDryRun(),
		AdmissionRevision: s.admissionRevision()})
	next.PodUid = md.Uid
	return s.env.Pub.Publish(ctx, next)
}

// refuseStreamReply rejects a PodRequested whose reply subject is not the
// requester's inbox (400), answering nobody: the reply subject is the
// attack.
func (s *Stage) refuseStreamReply(ctx context.Context, d *bus.Delivery, pod, reply string, err error) error {
	s.env.Log.Warn("PodRequested refused: bad reply subject", "namespace", d.Envelope.Namespace, "pod", pod, "err", err)
	st := stage.Failure(400, eventsv1.ReasonBadRequest, "pods", pod, "replyTo %q is not an inbox of the requester", reply)
	return stage.Reject(ctx, s.env, d, st, "")
}

// PodUID is the uid of the pod a PodRequested delivery creates. The
// client chooses the request id, so the uid also depends on what only the
// stream chooses — the message's sequence and the time it was stored —
// and two requests never share a uid, even with one request id, while a
// redelivery of the same message gets the same uid (and finds its pod).
func PodUID(d *bus.Delivery) string {
	key := fmt.Sprintf("podflow:pod:%s:%d:%d", d.Envelope.GetRequestId(), d.StreamSeq, d.Stored.UnixNano())
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte(key)).String()
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
	if err := checkClientReply(m.Reply); err != nil && m.Reply != "" {
		s.refuseReply(pipeline.ObjectSubject, m, err)
		return
	}
	req := &apiv1.ObjectRequest{}
	if err := proto.Unmarshal(m.Data, req); err != nil {
		s.reply(m, stage.Failure(400, eventsv1.ReasonBadRequest, "", "", "decode ObjectRequest: %v", err), nil)
		return
	}
	user, st := s.authn.AuthenticateToken(req.GetToken())
	if st != nil {
		s.reply(m, st, nil)
		return
	}
	if m.Reply != "" {
		if err := checkUserReply(m.Reply, user); err != nil {
			s.refuseReply(pipeline.ObjectSubject, m, err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, obj := s.objectAs(ctx, user, req)
	s.reply(m, st, obj)
}

// object authenticates req's token and serves it.
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
	if err != nil && s.cfg.SyncKinds != nil && s.cfg.SyncKinds(ctx) == nil {
		kind, err = objects.KindForResource(req.GetKind())
	}
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
	attrs := auth.Attributes{User: user, Namespace: ns, APIGroup: kind.APIGroup, Resource: kind.Resource, Name: req.GetName(),
		Subresource: req.GetSubresource()}
	if st := checkSubresource(kind, req.GetVerb(), attrs.Subresource, req.GetName()); st != nil {
		return st, nil
	}
	switch req.GetVerb() {
	case "delete":
		attrs.Verb = "delete"
		if st := s.rbac.Check(attrs); st != nil {
			return st, nil
		}
		warnings, st := s.admitDelete(ctx, kind, ns, req.GetName(), attrs)
		if st != nil {
			return withWarnings(st, warnings), nil
		}
		st, obj := s.delete(ctx, kind, ns, req)
		if st != nil {
			st = withWarnings(st, warnings)
		}
		return st, obj
	case "create", "apply", "update":
		obj := kind.New()
		if err := proto.Unmarshal(req.GetObject(), obj); err != nil {
			return stage.Failure(400, eventsv1.ReasonBadRequest, kind.Resource, "", "decode %s: %v", kind.Name, err), nil
		}
		if st := checkGenericKind(kind, obj); st != nil {
			return st, nil
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
		return s.apply(ctx, kind, obj, attrs, req.GetVerb(), req.GetDryRun())
	}
	return stage.Failure(405, "MethodNotAllowed", kind.Resource, req.GetName(), "verb %q is not supported", req.GetVerb()), nil
}

// delete deletes ns/name of kind: a pod gracefully, a Service with its
// ClusterIP, a namespace through its lifecycle, any other object as
// kube-apiserver's generic store does, with the request's garbage
// collection policy (deleteGeneric). Pods, Services and Namespaces take
// no garbage collection finalizers: their dependents go in the
// background whatever the policy.
func (s *Stage) delete(ctx context.Context, kind objects.Kind, ns string, req *apiv1.ObjectRequest) (*corev1.Status, proto.Message) {
	if kind.Name == objects.Pods.Name {
		return s.deletePod(ctx, ns, req.GetName(), req.GracePeriodSeconds)
	}
	if kind.Name == objects.Services.Name {
		return s.deleteService(ctx, ns, req.GetName())
	}
	if kind.Name == objects.Namespaces.Name {
		st, obj := s.namespaces.Delete(ctx, req.GetName())
		if obj == nil {
			return st, nil
		}
		return st, obj
	}
	return s.deleteGeneric(ctx, kind, ns, req.GetName(), stage.DeleteOptions{
		PropagationPolicy: req.PropagationPolicy, OrphanDependents: req.OrphanDependents,
	})
}

// apply creates obj (verb create), or replaces it when it exists (apply,
// update). An update whose object carries a resourceVersion replaces only
// that revision (409 Conflict otherwise), as a Kubernetes update does; an
// apply replaces whatever is stored.
func (s *Stage) apply(ctx context.Context, kind objects.Kind, obj objects.Object, attrs auth.Attributes, verb string, dry bool) (*corev1.Status, proto.Message) {
	createOnly := verb == "create"
	md := obj.GetMetadata()
	existing, err := s.env.Store.GetKind(ctx, kind, md.GetNamespace(), md.GetName())
	exists := err == nil
	if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		return stage.Internal(err), nil
	}
	attrs.Verb = "create"
	if !exists && verb == "update" {
		// The front door read the object before handing the update over;
		// it was deleted since. An update never creates (the front door
		// answers 404 to a PUT of an absent object, as kube-apiserver does).
		return stage.NotFound(kind.Resource, md.GetName()), nil
	}
	if exists {
		if createOnly {
			return stage.AlreadyExists(kind.Resource, md.GetName()), nil
		}
		attrs.Verb = "update"
	}
	if st := s.rbac.Check(attrs); st != nil {
		return st, nil
	}
	var warnings []string
	dynReq := s.webhookRequest(kind, attrs, obj, existing, exists, dry)
	if dynReq != nil { // the mutating webhooks, before validation
		res := s.cfg.Webhooks.Mutate(ctx, dynReq)
		warnings = append(warnings, res.Warnings...)
		if !res.Allowed() {
			return withWarnings(res.Status, warnings), nil
		}
		name, namespace := md.GetName(), md.GetNamespace()
		obj, md = res.Object, res.Object.GetMetadata()
		md.Name, md.Namespace = name, namespace // a webhook renames nothing
	}
	generic, isGeneric := obj.(*corev1.Unstructured)
	if st := validate.Object(obj); st != nil && !isGeneric { // names, ConfigMap and Secret sizes; the registry's for generic kinds
		return st, nil
	}
	if svc, ok := obj.(*corev1.Service); ok { // kube-apiserver's defaults and validation
		old, _ := existing.(*corev1.Service)
		// The status is the status subresource's (the front door's
		// services/status): kube's service strategy resets it on create
		// and keeps the stored one on update.
		if old != nil {
			svc.Status = proto.CloneOf(old.GetStatus())
		} else {
			svc.Status = &corev1.ServiceStatus{}
		}
		if st := validate.Service(svc, old); st != nil {
			return st, nil
		}
	}
	if node, ok := obj.(*corev1.Node); ok && exists {
		// kube's nodeStrategy.PrepareForUpdate: only nodes/status (the
		// front door's) and the node agent change a node's status.
		node.Status = proto.CloneOf(existing.(*corev1.Node).GetStatus())
	}
	// NamespaceLifecycle: new content only in a namespace that exists and
	// is not being terminated, read from the store; the write below
	// compares the namespace's revision, so a DELETE of the namespace
	// between this read and the write refuses it too.
	var parent *corev1.Namespace
	if kind.Namespaced && !exists {
		if parent, err = nslifecycle.Get(ctx, s.env.Store, md.GetNamespace()); err != nil {
			return stage.Internal(err), nil
		}
		if st := nslifecycle.CheckCreate(parent, md.GetNamespace(), kind.Resource, md.GetName()); st != nil {
			return st, nil
		}
	}
	if nsObj, ok := obj.(*corev1.Namespace); ok {
		if exists {
			nslifecycle.PrepareForUpdate(nsObj, existing.(*corev1.Namespace))
		} else {
			nslifecycle.PrepareForCreate(nsObj)
		}
	}
	now := timestamppb.Now()
	switch {
	case isGeneric: // uid, creationTimestamp and generation are the strategy's
		w, st := s.prepareGeneric(ctx, attrs, generic, existing)
		warnings = append(warnings, w...)
		if st != nil {
			return withWarnings(st, warnings), nil
		}
	case exists:
		prev := existing.GetMetadata()
		md.Uid, md.CreationTimestamp = prev.GetUid(), prev.GetCreationTimestamp()
		md.Generation = prev.GetGeneration() + 1
	default:
		md.Uid, md.CreationTimestamp, md.Generation = uuid.NewString(), now, 1
	}
	if kind.Name == objects.Events.Name {
		md.Generation = 0 // kube's event strategy keeps none
	}
	var old proto.Message
	if exists {
		old = existing
		if verb == "update" && md.GetResourceVersion() != "" && md.GetResourceVersion() != existing.GetMetadata().GetResourceVersion() {
			return conflict(kind.Resource, md.GetName()), nil // a precondition that no longer holds
		}
	}
	if st := s.rbac.CheckRBACWrite(attrs.User, obj, old, s.roleGetter(ctx)); st != nil {
		return st, nil // a role or binding granting more than its writer holds
	}
	if exists { // after escalation, as kube-apiserver's binding storage checks it first
		if st := validate.ObjectUpdate(obj, existing); st != nil { // immutable data, a binding's roleRef
			return st, nil
		}
	}
	if sec, ok := obj.(*corev1.Secret); ok {
		prev, _ := existing.(*corev1.Secret)
		if st := s.issueServiceAccountToken(ctx, sec, prev); st != nil {
			return st, nil
		}
	}
	if dynReq != nil { // the policies and validating webhooks, on the object as it will be stored
		dynReq.Object, dynReq.Reinvoke = obj, nil
		res := s.cfg.Webhooks.Validate(ctx, dynReq)
		warnings = append(warnings, res.Warnings...)
		if !res.Allowed() {
			return withWarnings(res.Status, warnings), nil
		}
	}
	if dry { // every check passed; nothing is stored (?dryRun=All)
		if exists {
			return withWarnings(stage.Success(200, kind.Resource, md.GetName()), warnings), obj
		}
		return withWarnings(stage.Success(201, kind.Resource, md.GetName()), warnings), obj
	}
	// ResourceQuota, last of admission as kube-apiserver orders it: the
	// usage is charged (a compare-and-swap on each quota) before the write.
	if s.cfg.Quota != nil && attrs.Subresource == "" {
		op := "CREATE"
		if exists {
			op = "UPDATE"
		}
		if st := s.cfg.Quota.Admit(ctx, attrs.User, kind, op, obj, existing); st != nil {
			return st, nil
		}
	}
	svc, isService := obj.(*corev1.Service)
	switch {
	case isService && exists:
		_, err = s.alloc.Update(ctx, s.env.Store, existing.(*corev1.Service), svc)
	case isService:
		_, err = s.alloc.Create(ctx, s.env.Store, svc)
	case exists && stage.DeletedByUpdate(existing, obj):
		// The last finalizer of an object being deleted went: the update
		// deletes it, as kube-apiserver's generic store does.
		_, err = s.env.Store.Delete(ctx, kind, md.GetNamespace(), md.GetName(), objects.Revision(existing))
	case exists:
		objects.SetRevision(obj, objects.Revision(existing))
		_, err = s.env.Store.Update(ctx, obj)
	case parent != nil:
		_, err = s.env.Store.Commit(ctx, objects.Txn{}.Unchanged(parent).Compare(obj, objects.Absent).Put(obj))
		if objects.ConflictOn(err, parent) {
			return s.apply(ctx, kind, obj, attrs, verb, dry) // the namespace changed: admit again
		}
	default:
		_, err = s.env.Store.Create(ctx, obj)
	}
	if st := allocStatus(err, md.GetName()); st != nil {
		return st, nil
	}
	if createOnly && (errors.Is(err, raftstore.ErrAlreadyExists) || objects.ConflictOn(err, obj)) {
		// Another create of the same name won the race since the read
		// above: kube-apiserver's 409 AlreadyExists, which clients that
		// tolerate an existing object (IsAlreadyExists) pass over.
		return stage.AlreadyExists(kind.Resource, md.GetName()), nil
	}
	if errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrAlreadyExists) {
		return conflict(kind.Resource, md.GetName()), nil
	}
	if errors.Is(err, raftstore.ErrNotFound) { // deleted after the read above: nothing was written
		return stage.NotFound(kind.Resource, md.GetName()), nil
	}
	if err != nil {
		return stage.Internal(err), nil
	}
	code := int32(201)
	if exists {
		code = 200
	}
	return withWarnings(stage.Success(code, kind.Resource, md.GetName()), warnings), obj
}

// roleGetter resolves a binding's roleRef from the store (not the cache,
// which may not have seen a role written just before its binding).
func (s *Stage) roleGetter(ctx context.Context) auth.RoleGetter {
	return func(ref *corev1.RoleRef, ns string) ([]*corev1.PolicyRule, error) {
		var kind objects.Kind
		switch ref.GetKind() {
		case auth.KindClusterRole:
			kind, ns = objects.ClusterRoles, ""
		case auth.KindRole:
			if ns == "" {
				return nil, fmt.Errorf("roles.%s %q not found", auth.RBACGroup, ref.GetName())
			}
			kind = objects.Roles
		default:
			return nil, fmt.Errorf("unsupported role reference kind: %q", ref.GetKind())
		}
		obj, err := s.env.Store.GetKind(ctx, kind, ns, ref.GetName())
		if errors.Is(err, raftstore.ErrNotFound) {
			return nil, fmt.Errorf("%s.%s %q not found", kind.Resource, auth.RBACGroup, ref.GetName())
		}
		if err != nil {
			return nil, fmt.Errorf("get %s %q: %w", kind.Resource, ref.GetName(), err)
		}
		if cr, ok := obj.(*corev1.ClusterRole); ok {
			return cr.GetRules(), nil
		}
		return obj.(*corev1.Role).GetRules(), nil
	}
}

// conflict is Kubernetes' 409 for an update of a revision that is no
// longer the stored one.
func conflict(resource, name string) *corev1.Status {
	return stage.Failure(409, eventsv1.ReasonConflict, resource, name,
		"Operation cannot be fulfilled on %s %q: the object has been modified; please apply your changes to the latest version and try again", resource, name)
}

// allocStatus is the Status of a refused ClusterIP (nil for any other
// outcome): 422 Invalid as kube-apiserver words it, or 500 for a full range.
func allocStatus(err error, name string) *corev1.Status {
	var e *ipalloc.Error
	switch {
	case errors.As(err, &e):
		return stage.Failure(422, eventsv1.ReasonInvalid, "services", name, "Service %q is invalid: %v", name, e)
	case errors.Is(err, ipalloc.ErrFull), errors.Is(err, ipalloc.ErrPortsFull):
		return stage.Failure(500, "InternalError", "services", name, "Internal error occurred: %v", err)
	}
	return nil
}

// deleteService deletes a Service and releases its ClusterIP in one store
// transaction, retrying from a fresh read when the Service moved on.
func (s *Stage) deleteService(ctx context.Context, ns, name string) (*corev1.Status, proto.Message) {
	for {
		svc, err := objects.Get[*corev1.Service](ctx, s.env.Store, ns, name)
		if errors.Is(err, raftstore.ErrNotFound) {
			return stage.NotFound("services", name), nil
		}
		if err != nil {
			return stage.Internal(err), nil
		}
		_, err = s.alloc.Delete(ctx, s.env.Store, svc)
		if errors.Is(err, raftstore.ErrConflict) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return stage.Internal(err), nil
		}
		return stage.Success(200, "services", name), nil
	}
}

// issueServiceAccountToken makes a ServiceAccount token Secret the
// server's, as Kubernetes' token controller does: the ServiceAccount it
// names must exist (else 422), the Secret is bound to that account's uid
// (kubernetes.io/service-account.uid), and its token is issued here — a
// token the writer put in data.token is ignored; an update of a Secret
// already bound to the same account keeps the token issued before.
func (s *Stage) issueServiceAccountToken(ctx context.Context, sec, prev *corev1.Secret) *corev1.Status {
	if sec.GetType() != auth.SecretTypeServiceAccountToken {
		return nil
	}
	md := sec.GetMetadata()
	saName := md.GetAnnotations()[auth.AnnotationServiceAccountName]
	invalid := func(format string, args ...any) *corev1.Status {
		return stage.Failure(422, eventsv1.ReasonInvalid, "secrets", md.GetName(), "Secret %q is invalid: "+format, append([]any{md.GetName()}, args...)...)
	}
	if saName == "" {
		return invalid("metadata.annotations[%s]: Required value", auth.AnnotationServiceAccountName)
	}
	sa, err := objects.Get[*corev1.ServiceAccount](ctx, s.env.Store, md.GetNamespace(), saName)
	if errors.Is(err, raftstore.ErrNotFound) {
		return invalid("metadata.annotations[%s]: Not found: serviceaccounts %q", auth.AnnotationServiceAccountName, saName)
	}
	if err != nil {
		return stage.Internal(err)
	}
	uid := sa.GetMetadata().GetUid()
	if md.Annotations == nil {
		md.Annotations = map[string]string{}
	}
	md.Annotations[auth.AnnotationServiceAccountUID] = uid
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	pa := prev.GetMetadata().GetAnnotations()
	if old := prev.GetData()[auth.SecretTokenKey]; prev.GetType() == auth.SecretTypeServiceAccountToken && len(old) > 0 &&
		pa[auth.AnnotationServiceAccountName] == saName && pa[auth.AnnotationServiceAccountUID] == uid {
		sec.Data[auth.SecretTokenKey] = old
		return nil
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	sec.Data[auth.SecretTokenKey] = []byte(hex.EncodeToString(b))
	return nil
}

// deletePod starts a pod's graceful deletion (stage.DeletePod) and
// answers with the pod as marked terminating.
func (s *Stage) deletePod(ctx context.Context, ns, name string, grace *int64) (*corev1.Status, proto.Message) {
	pod, err := stage.DeletePod(ctx, s.env, ns, name, grace)
	if errors.Is(err, raftstore.ErrNotFound) {
		return stage.NotFound("pods", name), nil
	}
	if err != nil {
		return stage.Internal(err), nil
	}
	return stage.Success(200, "pods", name), pod
}

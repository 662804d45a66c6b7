package api

// The HTTPS front door (services/apiserver's FrontDoor) runs in the api
// process and calls the stage in process through the methods below: the
// user it authenticated (client certificate, token, OIDC) is trusted
// because it never crossed the bus. A pod creation from HTTPS is
// authorized here and enters the pipeline as PodAuthorized with a reply
// subject this replica listens on; on the stream its record starts at
// PodAuthorized (there is no PodRequested to record: the request arrived
// over HTTPS).

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

var (
	_ apiserver.Backend       = (*Stage)(nil)
	_ apiserver.TokenReviewer = (*Stage)(nil)
)

// ReviewToken implements apiserver.TokenReviewer (TokenReview).
func (s *Stage) ReviewToken(token string, audiences []string) (auth.TokenReviewResult, bool, error) {
	return s.authn.ReviewToken(token, audiences)
}

// AuthenticateToken implements apiserver.Backend.
func (s *Stage) AuthenticateToken(token string) (*corev1.UserInfo, *corev1.Status) {
	return s.authn.AuthenticateToken(token)
}

// Authorize implements apiserver.Backend.
func (s *Stage) Authorize(a auth.Attributes) auth.Decision { return s.rbac.Authorize(a) }

// RulesFor implements apiserver.Backend.
func (s *Stage) RulesFor(user *corev1.UserInfo, namespace string) []*corev1.PolicyRule {
	return s.rbac.RulesFor(user, namespace)
}

// Object implements apiserver.Backend.
func (s *Stage) Object(ctx context.Context, user *corev1.UserInfo, req *apiv1.ObjectRequest) (*corev1.Status, proto.Message) {
	return s.objectAs(ctx, user, req)
}

// CreatePod implements apiserver.Backend.
func (s *Stage) CreatePod(ctx context.Context, user *corev1.UserInfo, pod *corev1.Pod, dryRun bool) (*corev1.Status, *corev1.Pod) {
	pod = vt.Clone(pod)
	md := objects.Meta(pod)
	md.Namespace = podrules.NamespaceOrDefault(md.Namespace)
	requestID := uuid.NewString()
	if md.Name == "" && md.GenerateName != "" {
		md.Name = md.GenerateName + suffix(requestID)
	}
	if st := s.rbac.Check(auth.Attributes{User: user, Verb: "create", Namespace: md.Namespace, Resource: "pods"}); st != nil {
		st.Kind, st.Name = "pods", md.Name
		return st, nil
	}
	md.Uid = uuid.NewString() // the server's uid: nothing of the request's
	if st := s.namespaces.Admit(ctx, md.Namespace, "pods", md.Name); st != nil {
		return st, nil
	}
	if st := s.admitPod(ctx, user, md.Name, proto.Size(pod)); st != nil {
		return st, nil
	}
	inbox, ch, release := s.replies.wait()
	defer release()
	authorized := &eventsv1.PodAuthorized{Pod: pod, User: user, ReplyTo: inbox, DryRun: dryRun, AdmissionRevision: s.admissionRevision()}
	env := &eventsv1.Envelope{
		PodUid:      md.Uid,
		RequestId:   requestID,
		Namespace:   md.Namespace,
		PodName:     md.Name,
		Time:        timestamppb.Now(),
		Stage:       s.env.Stage,
		Replica:     s.env.Replica,
		Attempt:     1,
		Traceparent: bus.NewTraceparent(),
		Payload:     &eventsv1.Envelope_PodAuthorized{PodAuthorized: authorized},
	}
	if err := s.env.Pub.Publish(ctx, env); err != nil {
		return stage.Failure(503, "ServiceUnavailable", "pods", md.Name, "publish PodAuthorized: %v", err), nil
	}
	select {
	case <-ctx.Done():
		return stage.Failure(504, "Timeout", "pods", md.Name, "the pod was accepted but its creation did not complete in time: %v", ctx.Err()), nil
	case m := <-ch:
		resp := &apiv1.Response{}
		if err := proto.Unmarshal(m.Data, resp); err != nil {
			return stage.Internal(fmt.Errorf("decode the reply: %w", err)), nil
		}
		if resp.GetKind() == "" {
			return resp.GetStatus(), nil
		}
		out := &corev1.Pod{}
		if err := proto.Unmarshal(resp.GetObject(), out); err != nil {
			return stage.Internal(fmt.Errorf("decode the created pod: %w", err)), nil
		}
		return resp.GetStatus(), out
	}
}

// replyMux receives the replies to this replica's requests on one
// wildcard inbox subscription and hands each to its waiter.
type replyMux struct {
	prefix string
	sub    *nats.Subscription
	next   atomic.Uint64
	mu     sync.Mutex
	wait_  map[string]chan *nats.Msg
}

func newReplyMux(nc *nats.Conn) (*replyMux, error) {
	m := &replyMux{prefix: nc.NewInbox() + ".", wait_: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe(m.prefix+"*", func(msg *nats.Msg) {
		m.mu.Lock()
		ch := m.wait_[strings.TrimPrefix(msg.Subject, m.prefix)]
		m.mu.Unlock()
		if ch != nil {
			select {
			case ch <- msg: // the first answer wins; later ones are dropped
			default:
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("api: subscribe to replies: %w", err)
	}
	m.sub = sub
	return m, nil
}

// wait registers a waiter: its reply subject, the channel its reply
// arrives on, and the release to call when done.
func (m *replyMux) wait() (string, <-chan *nats.Msg, func()) {
	id := fmt.Sprintf("%d", m.next.Add(1))
	ch := make(chan *nats.Msg, 1)
	m.mu.Lock()
	m.wait_[id] = ch
	m.mu.Unlock()
	return m.prefix + id, ch, func() {
		m.mu.Lock()
		delete(m.wait_, id)
		m.mu.Unlock()
	}
}

func (m *replyMux) close() { _ = m.sub.Unsubscribe() }

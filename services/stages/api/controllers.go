package api

// The controller intake. A workload controller stage (ReplicaSet, ...)
// creates its pods through the pipeline, as a user does, and asks for them
// on pipeline.ControllerPodsSubject(stage): only that stage's bus identity
// may publish there, so the subject names the controller as the bus
// authenticated it, and its requests are made as the controller's
// ServiceAccount (pipeline.ControllerUser), authorized by RBAC like any
// user's. An accepted request becomes a PodRequested on the stream, still
// the controller's event (its stage, replica, request id, trace context
// and the time its sync took), carrying the controller's user instead of
// a token; the stage that ends the request answers the controller.

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/google/uuid"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// onControllerPod serves pipeline.ControllerPodsPrefix.<stage>.
func (s *Stage) onControllerPod(ctx context.Context, m *nats.Msg) {
	ctl := strings.TrimPrefix(m.Subject, pipeline.ControllerPodsPrefix+".")
	user := pipeline.ControllerUser(ctl)
	if user == nil {
		s.env.Log.Warn("controller pod request dropped: not a controller stage", "subject", m.Subject)
		return
	}
	if err := checkControllerReply(m.Reply, ctl); err != nil {
		s.refuseReply(m.Subject, m, err)
		return
	}
	if st := s.intake.checkSize(len(m.Data)); st != nil {
		s.reply(m, st, nil)
		return
	}
	in := &eventsv1.Envelope{}
	if err := vt.Unmarshal(m.Data, in); err != nil || in.GetPodRequested() == nil {
		s.reply(m, stage.Failure(400, eventsv1.ReasonBadRequest, "pods", "", "a controller's pod request is an Envelope holding a PodRequested"), nil)
		return
	}
	req := in.GetPodRequested()
	pod := req.GetPod()
	md := pod.GetMetadata()
	if md.GetName() == "" || md.GetNamespace() == "" {
		s.reply(m, stage.Failure(400, eventsv1.ReasonBadRequest, "pods", md.GetName(), "a controller names its pods and their namespace"), nil)
		return
	}
	if st := s.rbac.Check(auth.Attributes{User: user, Verb: "create", Namespace: md.GetNamespace(), Resource: "pods"}); st != nil {
		st.Kind, st.Name = "pods", md.GetName()
		s.reply(m, st, nil)
		return
	}
	if st := s.events.check(ctx, md.GetName()); st != nil { // before it takes room in the stream
		s.reply(m, st, nil)
		return
	}
	requestID := in.GetRequestId()
	if requestID == "" {
		requestID = uuid.NewString()
	}
	tp := in.GetTraceparent()
	if tp == "" {
		tp = bus.NewTraceparent()
	}
	out := &eventsv1.Envelope{
		RequestId: requestID, Namespace: podrules.NamespaceOrDefault(md.GetNamespace()), PodName: md.GetName(),
		Time: timestamppb.Now(), Stage: ctl, Replica: in.GetReplica(), Attempt: max(in.GetAttempt(), 1), Traceparent: tp,
		HandledStart: in.GetHandledStart(), HandledEnd: in.GetHandledEnd(),
		Payload: &eventsv1.Envelope_PodRequested{PodRequested: &eventsv1.PodRequested{Pod: pod, User: user, ReplyTo: m.Reply, DryRun: req.GetDryRun()}},
	}
	if err := s.env.Pub.Publish(ctx, out); err != nil {
		s.reply(m, stage.Failure(503, "ServiceUnavailable", "pods", md.GetName(), "publish PodRequested: %v", err), nil)
	}
}

// checkControllerReply returns nil when subject is an inbox of the
// controller stage ctl's bus identity (bus.InboxPrefix of its role), the
// only inboxes its answers may go to.
func checkControllerReply(subject, ctl string) error {
	if err := stage.CheckReplySubject(subject); err != nil {
		return err
	}
	if !strings.HasPrefix(subject, bus.InboxPrefix(pipeline.StageRole(ctl))+".") {
		return stageReplyError(subject, ctl)
	}
	return nil
}

func stageReplyError(subject, ctl string) error {
	return &replyError{subject: subject, owner: bus.InboxPrefix(pipeline.StageRole(ctl))}
}

type replyError struct{ subject, owner string }

func (e *replyError) Error() string {
	return stage.ErrReplySubject.Error() + ": " + e.subject + " is not below " + e.owner + "."
}

func (e *replyError) Unwrap() error { return stage.ErrReplySubject }

// checkReplyOf returns nil when a request's reply subject may be answered
// for user: a controller's under its stage's inboxes, any other user's
// under its own (checkUserReply).
func checkReplyOf(subject string, user *corev1.UserInfo) error {
	if ctl, ok := pipeline.ControllerOfUser(user.GetUsername()); ok {
		return checkControllerReply(subject, ctl)
	}
	return checkUserReply(subject, user)
}

package api

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// TestReplySubjects: on embedded NATS, the api stage's request-reply
// subjects answer a requester's inbox and never a subject the requester
// names otherwise — an event subject (the api stage may publish
// PodAuthorized there) or another podflow identity's inbox: such a
// request is dropped unanswered.
func TestReplySubjects(t *testing.T) {
	f := newFixture(t)
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "api")
	f.s.env.NATS, f.s.env.Pub = conn.NATS(), stage.NewPublisher(conn)
	stagetest.Start(t, func(ctx context.Context, g *errgroup.Group) error {
		if err := f.s.serve(ctx, g, pipeline.CreatePodSubject, f.s.onCreatePod); err != nil {
			return err
		}
		return f.s.serve(ctx, g, pipeline.ObjectSubject, f.s.onObject)
	})
	client := bustest.Connect(t, srv, "client").NATS()
	watch := bustest.Connect(t, srv, "watch").NATS()
	seen := make(chan *nats.Msg, 16)
	for _, subj := range []string{"podflow.>", bus.InboxPrefix(pipeline.StageRole(pipeline.Scheduler)) + ".>"} {
		sub, err := watch.ChanSubscribe(subj, seen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	objBody, _ := proto.Marshal(&apiv1.ObjectRequest{Token: "nope-0123456789abcdef", Verb: "get", Kind: "configmaps"})
	for _, tt := range []struct {
		name, subject, reply string
		data                 []byte
	}{
		{"pod creation answering on an event subject", pipeline.CreatePodSubject, "podflow.pod.PodAuthorized.~.default.x", []byte{0xff}},
		{"object request answering on an event subject", pipeline.ObjectSubject, "podflow.pod.PodAuthorized.~.default.x", objBody},
		{"object request answering into a stage's inbox", pipeline.ObjectSubject, bus.InboxPrefix(pipeline.StageRole(pipeline.Scheduler)) + ".abc.1", objBody},
		{"wildcard inbox", pipeline.ObjectSubject, "_INBOX.*", objBody},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := client.PublishRequest(tt.subject, tt.reply, tt.data); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A request on the requester's own inbox is answered: once it is, the
	// refused ones (sent before, served in order per subject by the same
	// workers) have been handled too.
	for _, subj := range []string{pipeline.CreatePodSubject, pipeline.ObjectSubject} {
		data := []byte{0xff}
		if subj == pipeline.ObjectSubject {
			data = objBody
		}
		m, err := client.Request(subj, data, 10*time.Second)
		if err != nil {
			t.Fatalf("request on %s: %v", subj, err)
		}
		resp := &apiv1.Response{}
		if err := proto.Unmarshal(m.Data, resp); err != nil || resp.GetStatus().GetCode() < 400 {
			t.Errorf("answer on %s: %v %v, want a refusal", subj, resp, err)
		}
	}
	timeout := time.After(300 * time.Millisecond)
	for {
		select {
		case m := <-seen:
			if m.Subject != pipeline.CreatePodSubject && m.Subject != pipeline.ObjectSubject { // the requests themselves
				t.Fatalf("the api stage published on %q", m.Subject)
			}
		case <-timeout:
			return
		}
	}
}

// TestServeRegistersBeforeReturning: serve returns once the server holds
// its queue subscription, so a request sent right after the stage started
// finds a replica. (The subscription goes out asynchronously; a request
// racing it timed out in TestReplySubjects under load.)
func TestServeRegistersBeforeReturning(t *testing.T) {
	f := newFixture(t)
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "api")
	f.s.env.NATS, f.s.env.Pub = conn.NATS(), stage.NewPublisher(conn)
	for i := range 40 {
		subj := []string{pipeline.CreatePodSubject, pipeline.ObjectSubject}[i%2]
		ctx, cancel := context.WithCancel(context.Background())
		g, gctx := errgroup.WithContext(ctx)
		if err := f.s.serve(gctx, g, subj, f.s.onObject); err != nil {
			t.Fatal(err)
		}
		sz, err := srv.Server().Subsz(&server.SubszOptions{Subscriptions: true, Test: subj})
		if err != nil {
			t.Fatal(err)
		}
		var queued int
		for _, sd := range sz.Subs {
			if sd.Queue == pipeline.API {
				queued++
			}
		}
		cancel()
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if queued != 1 {
			t.Errorf("%d: right after serve(%q) the server holds %d api queue subscriptions on it, want 1", i, subj, queued)
		}
	}
}

// TestPodRequestedReplyTo: a PodRequested published on the stream with a
// reply subject that is not an inbox is refused (PodRejected, 400) and not
// answered anywhere.
func TestPodRequestedReplyTo(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, reply := range []string{"podflow.pod.PodAuthorized.~.default.x", "_INBOX.stage-persistence.x.1", "_INBOX.store.a", "_INBOX.node-n1.x", "_INBOX.nodes-sim.x"} {
		t.Run(reply, func(t *testing.T) {
			f.pub.Reset()
			e := requested(f, aliceToken, &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web"}, Spec: &corev1.PodSpec{}})
			e.GetPodRequested().ReplyTo = reply
			if err := f.s.Handle(ctx, stagetest.Deliver(f.env, e)); err != nil {
				t.Fatal(err)
			}
			evs := f.pub.Events()
			if len(evs) != 1 || evs[0].GetPodRejected().GetStatus().GetCode() != 400 || evs[0].GetPodRejected().GetStatus().GetReason() != eventsv1.ReasonBadRequest {
				t.Fatalf("published %v, want one PodRejected 400", evs)
			}
			if evs[0].GetPodRejected().GetReplyTo() != "" || len(f.pub.Replies()) != 0 {
				t.Errorf("answered %v / replyTo %q, want no answer", f.pub.Replies(), evs[0].GetPodRejected().GetReplyTo())
			}
		})
	}
}

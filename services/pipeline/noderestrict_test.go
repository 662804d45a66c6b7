package pipeline_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/status"
)

// stageEnv connects as name with name's stage role and returns the Env of
// a replica of it over an in-memory store.
func stageEnv(t *testing.T, srv *bus.Embedded, name, replica string) (*bus.Conn, stage.Env) {
	t.Helper()
	conn := bustest.ConnectAs(t, srv, pipeline.StageRole(name), replica)
	env := stage.NewEnv(conn, objects.FromKV(objectstest.New()), name, replica, slog.New(slog.DiscardHandler))
	// Namespace default, as `podflow up` creates it (content in a missing
	// namespace is refused).
	ns := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: "default", Uid: "ns-default"}}
	nslifecycle.PrepareForCreate(ns)
	if _, err := env.Store.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return conn, env
}

// runStage runs h as env's stage replica on conn until the test ends.
func runStage(t *testing.T, conn *bus.Conn, env stage.Env, h stage.Handler) {
	t.Helper()
	rc, err := pipeline.RunnerConfig(env.Stage, env.Replica)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stage.Run(ctx, conn, env, h, stage.Config{Runner: rc}) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("stage %s: %v", env.Stage, err)
		}
	})
}

// TestNodeRestrictionOnTheBus: node n1, connected with its own identity
// and publishing only on subjects the bus allows it, tries to change n2's
// pod (a status report moving its IP), delete it, delete its own pod that
// nobody deleted, and speak for n2 in an envelope on its own subject. The
// status stage, running as stage-status, refuses each (dead-lettered with
// bus.CodeForbidden and its reason) and the store keeps the pods as they
// were; n1's report on its own pod is applied.
func TestNodeRestrictionOnTheBus(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	conn, env := stageEnv(t, srv, pipeline.Status, "status-1")
	for _, p := range []struct{ name, node string }{{"mine", "n1"}, {"theirs", "n2"}} {
		pod := &corev1.Pod{
			Metadata: &corev1.ObjectMeta{Name: p.name, Namespace: "default", Uid: "uid-" + p.name},
			Spec:     &corev1.PodSpec{NodeName: p.node},
			Status:   &corev1.PodStatus{Phase: "Running", PodIp: "10.244.0.10"},
		}
		if _, err := env.Store.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	st, err := status.NewStage(env, status.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	runStage(t, conn, env, st)

	n1 := bustest.ConnectAs(t, srv, pipeline.NodeRole("n1"), "n1")
	ev := func(pod string, deleted bool, seq int64) *eventsv1.Envelope {
		e := &eventsv1.Envelope{Namespace: "default", PodName: pod, PodUid: "uid-" + pod, NodeName: "n1", Stage: "nodeagent", Replica: "n1", Generation: seq}
		if deleted {
			e.Payload = &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{}}
		} else {
			e.Payload = &eventsv1.Envelope_PodStatusReport{PodStatusReport: &eventsv1.PodStatusReport{
				Seq: seq, Status: &corev1.PodStatus{Phase: "Running", PodIp: "10.244.9.9"},
			}}
		}
		e.Time = timestamppb.Now()
		return e
	}
	posing := ev("theirs", false, 2)
	onOwnSubject := bus.Subject(ev("theirs", false, 2))
	posing.NodeName = "n2"
	forged := []struct {
		env     *eventsv1.Envelope
		subject string
		reason  string
	}{
		{ev("theirs", false, 1), "", stage.RefusedNotBoundToNode},
		{ev("theirs", true, 1), "", stage.RefusedNotBoundToNode},
		{ev("mine", true, 1), "", stage.RefusedNotTerminating},
		{posing, onOwnSubject, stage.RefusedSubjectMismatch},
	}
	want := map[string]string{} // event id -> reason
	for _, f := range forged {
		var opts []bus.PublishOption
		if f.subject != "" {
			opts = append(opts, bus.WithSubject(f.subject))
		}
		if _, err := n1.Publish(ctx, f.env, opts...); err != nil {
			t.Fatalf("node n1 may not publish on its own subject: %v", err)
		}
		want[f.env.GetId()] = f.reason
	}
	if _, err := n1.Publish(ctx, ev("mine", false, 3)); err != nil {
		t.Fatal(err)
	}

	dlq, err := admin.JetStream().Stream(ctx, bus.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "the forged events dead-lettered", func() bool {
		info, err := dlq.Info(ctx)
		return err == nil && info.State.Msgs == uint64(len(forged))
	})
	for seq := uint64(1); seq <= uint64(len(forged)); seq++ {
		raw, err := dlq.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := bus.DecodeEnvelope(raw.Data)
		if err != nil {
			t.Fatal(err)
		}
		dl := rec.GetDeadLetter()
		reason, ok := want[rec.GetCausedBy()]
		if !ok {
			t.Fatalf("unexpected dead letter %v", rec)
		}
		delete(want, rec.GetCausedBy())
		if !errors.Is(&bus.Error{Code: dl.GetCode()}, bus.ErrForbidden) || !strings.Contains(dl.GetError(), "("+reason+")") {
			t.Errorf("dead letter of %s: code %s, %q; want %s refusing %s", rec.GetCausedBy(), dl.GetCode(), dl.GetError(), bus.CodeForbidden, reason)
		}
	}
	bustest.Eventually(t, "n1's report on its own pod applied", func() bool {
		p, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "mine")
		return err == nil && p.GetStatus().GetPodIp() == "10.244.9.9"
	})
	for _, name := range []string{"theirs", "mine"} {
		p, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", name)
		if errors.Is(err, raftstore.ErrNotFound) {
			t.Errorf("pod %s deleted by a forged PodDeleted", name)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if name == "theirs" && p.GetStatus().GetPodIp() != "10.244.0.10" {
			t.Errorf("n2's pod has IP %s: n1's report was applied", p.GetStatus().GetPodIp())
		}
	}
}

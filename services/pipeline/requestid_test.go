package pipeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
	"github.com/podflow/podflow/services/stages/admission"
	"github.com/podflow/podflow/services/stages/api"
	"github.com/podflow/podflow/services/stages/persistence"
)

// TestConcurrentRequestsWithOneRequestID: a client publishes, at once, N
// PodRequested with the same request id and different pod names, on a
// 3-replica store (real raft) with the api, admission and two persistence
// replicas running as their roles. However the persistence replicas'
// handlings interleave, exactly one pod is stored and every other request
// ends in PodRejected 409 Conflict naming it. Handling the PodAdmitted
// events again (a redelivery) changes nothing in the store and ends each
// the same way.
func TestConcurrentRequestsWithOneRequestID(t *testing.T) {
	t.Parallel()
	const n = 8
	srv, admin := lockedDown(t)
	storeClient := storeReplicas(t, srv, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*bustest.Timeout)
	defer cancel()
	realEnv := func(name, replica string) (*bus.Conn, stage.Env) {
		role := pipeline.StageRole(name)
		conn := bustest.ConnectAs(t, srv, role, replica)
		return conn, stage.NewEnv(conn, objects.New(storeClient(role, role)), name, replica, slog.New(slog.DiscardHandler))
	}

	const adminToken = "admin-token-0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+",admin,uid-admin,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conn, env := realEnv(pipeline.API, "api-1")
	cfg := api.DefaultConfig()
	cfg.TokenFile = tokens
	apiStage, err := api.New(env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runStage(t, conn, env, apiStage)
	conn, env = realEnv(pipeline.Admission, "admission-1")
	adm, err := admission.NewStage(env, admission.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	runStage(t, conn, env, adm)
	var persistEnv stage.Env
	for _, replica := range []string{"persistence-1", "persistence-2"} {
		conn, persistEnv = realEnv(pipeline.Persistence, replica)
		runStage(t, conn, persistEnv, persistence.New(persistEnv))
	}

	const requestID = "shared-request-id"
	user := bustest.Connect(t, srv, "attacker") // only the bus admin publishes PodRequested itself (podflow publish)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("copy-%d", i)},
				Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "busybox"}}}}
			e := &eventsv1.Envelope{Id: fmt.Sprintf("attack-%d", i), RequestId: requestID, Namespace: "default", PodName: pod.Metadata.Name, Stage: "client",
				Payload: &eventsv1.Envelope_PodRequested{PodRequested: &eventsv1.PodRequested{Pod: pod, Token: adminToken}}}
			_, err := user.Publish(ctx, e)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("the client publishes PodRequested: %v", err)
		}
	}

	// Every request ends: PodPersisted or PodRejected, one per request.
	stream, err := admin.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes map[eventsv1.Type][]*eventsv1.Envelope
	var admitted []*eventsv1.Envelope
	bustest.Eventually(t, "every request persisted or rejected", func() bool {
		outcomes, admitted = map[eventsv1.Type][]*eventsv1.Envelope{}, nil
		info, err := stream.Info(ctx)
		if err != nil {
			return false
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := stream.GetMsg(ctx, seq)
			if err != nil {
				return false
			}
			e, err := bus.DecodeEnvelope(m.Data)
			if err != nil || e.GetRequestId() != requestID {
				continue
			}
			switch e.Type() {
			case "PodPersisted", "PodRejected":
				outcomes[e.Type()] = append(outcomes[e.Type()], e)
			case "PodAdmitted":
				admitted = append(admitted, e)
			}
		}
		return len(outcomes["PodPersisted"])+len(outcomes["PodRejected"]) == n
	})
	if got := len(outcomes["PodPersisted"]); got != 1 {
		t.Fatalf("%d pods persisted with request id %q, want exactly 1", got, requestID)
	}
	winner := outcomes["PodPersisted"][0].GetPodName()
	for _, r := range outcomes["PodRejected"] {
		st := r.GetPodRejected().GetStatus()
		if st.GetCode() != 409 || st.GetReason() != eventsv1.ReasonConflict {
			t.Errorf("%s rejected with %d %s (%s), want 409 Conflict", r.GetPodName(), st.GetCode(), st.GetReason(), st.GetMessage())
		}
	}
	store := persistEnv.Store
	stored, _, err := objects.List[*corev1.Pod](ctx, store, "default")
	if err != nil {
		t.Fatal(err)
	}
	key, err := store.KV().Get(ctx, persistence.RequestIDKey(requestID))
	if err != nil {
		t.Fatalf("the request id's key: %v", err)
	}
	if len(stored) != 1 || stored[0].GetMetadata().GetName() != winner {
		t.Fatalf("stored pods %v, want only %s", podNames(stored), winner)
	}

	// Redelivery: each PodAdmitted handled again ends as it did, and
	// writes nothing.
	if len(admitted) != n {
		t.Fatalf("%d PodAdmitted in the stream, want %d", len(admitted), n)
	}
	rec := &stagetest.Publisher{}
	replay := persistEnv
	replay.Pub, replay.Replica = rec, "persistence-replay"
	for _, e := range admitted {
		d := stagetest.Deliver(replay, proto.CloneOf(e))
		d.NumDelivered = 2
		rec.Reset()
		if err := persistence.New(replay).Handle(ctx, d); err != nil {
			t.Fatalf("redelivery of %s: %v", e.GetPodName(), err)
		}
		want := eventsv1.Type("PodRejected")
		if e.GetPodName() == winner {
			want = "PodPersisted"
		}
		if got := rec.Types(); len(got) != 1 || got[0] != want {
			t.Errorf("redelivery of %s published %v, want %s", e.GetPodName(), got, want)
		}
	}
	after, _, err := objects.List[*corev1.Pod](ctx, store, "default")
	if err != nil {
		t.Fatal(err)
	}
	keyAfter, err := store.KV().Get(ctx, persistence.RequestIDKey(requestID))
	if err != nil || keyAfter.ModRevision != key.ModRevision || len(after) != 1 || !proto.Equal(after[0], stored[0]) {
		t.Errorf("the redeliveries changed the store: pods %v, request id key %v (%v), was at revision %d", podNames(after), keyAfter, err, key.ModRevision)
	}
}

func podNames(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.GetMetadata().GetName())
	}
	return out
}

package pipeline_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/sealed"
	"github.com/podflow/podflow/services/stages/api"
)

// TestNoTokenInTheStream: a client creates a pod through the api front
// door with the admin's bearer token (what `podflow apply` does), and the
// bus admin publishes a PodRequested itself with the token sealed to the
// api stage's public key (`podflow publish`). Reading the events stream's
// messages by sequence — as node n1 and as the endpoints stage, who may —
// yields no token: the api stage, running as stage-api, seals what it
// republishes, and opens both.
func TestNoTokenInTheStream(t *testing.T) {
	t.Parallel()
	srv, _ := lockedDown(t)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	const adminToken = "admin-token-0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+",admin,uid-admin,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := sealed.LoadOrCreate(filepath.Join(t.TempDir(), "seal.key"))
	if err != nil {
		t.Fatal(err)
	}
	conn, env := stageEnv(t, srv, pipeline.API, "api-1")
	cfg := api.DefaultConfig()
	cfg.TokenFile, cfg.SealKey = tokens, key
	st, err := api.New(env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runStage(t, conn, env, st)

	admin := bustest.Connect(t, srv, "admin-reader")
	cons, err := admin.JetStream().Consumer(ctx, bus.EventsStream, pipeline.API)
	if err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "the api stage to serve (its runner pulls once its front door listens)", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumWaiting > 0
	})
	user := bustest.ConnectUser(t, srv, "admin", "user")    // the admin's own bus identity
	publisher := bustest.Connect(t, srv, "podflow-publish") // users may not publish onto the stream: the bus admin
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: &corev1.PodSpec{}}
	b, _ := proto.Marshal(&eventsv1.PodRequested{Pod: pod, Token: adminToken})
	// The answer would come from admission, which does not run here: the
	// request is on the stream once the api stage took it.
	qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
	_, _ = user.NATS().RequestWithContext(qctx, pipeline.CreatePodSubject, b)
	qcancel()
	sealedToken, err := sealed.Seal(key.Public, adminToken)
	if err != nil {
		t.Fatal(err)
	}
	direct := &eventsv1.Envelope{Namespace: "default", PodName: "direct", Stage: "client", RequestId: "direct-1",
		Payload: &eventsv1.Envelope_PodRequested{PodRequested: &eventsv1.PodRequested{Pod: pod, Token: sealedToken}}}
	if _, err := publisher.Publish(ctx, direct); err != nil {
		t.Fatal(err)
	}

	stream, err := admin.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	// Both requests authorized: each PodRequested followed by its PodAuthorized.
	bustest.Eventually(t, "both requests authorized", func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs >= 4
	})
	for _, reader := range []struct{ role, name string }{{pipeline.NodeRole("n1"), "n1"}, {pipeline.StageRole(pipeline.Status), "status-1"}} {
		c := bustest.ConnectAs(t, srv, reader.role, reader.name)
		s, err := c.JetStream().Stream(ctx, bus.EventsStream)
		if err != nil {
			t.Fatalf("%s looks the stream up: %v", reader.role, err)
		}
		authorized := 0
		for seq := uint64(1); seq <= 4; seq++ {
			gctx, gcancel := context.WithTimeout(ctx, 3*time.Second)
			m, err := s.GetMsg(gctx, seq)
			gcancel()
			if err != nil {
				continue // refused is as good
			}
			if bytes.Contains(m.Data, []byte(adminToken)) {
				t.Errorf("%s reads message %d with the admin's token in clear", reader.role, seq)
			}
			e, err := bus.DecodeEnvelope(m.Data)
			if err == nil && e.GetPodAuthorized().GetUser().GetUsername() == "admin" {
				authorized++
			}
		}
		if reader.name == "n1" && authorized != 2 {
			t.Errorf("%d requests authorized as admin, want both (the api stage opens sealed tokens)", authorized)
		}
	}
}

package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/eventsv1"
)

// TestClientRoleIsLockedDown: the client identity users get may publish
// PodRequested and ask the api front door, but the server refuses a forged
// PodAdmitted or PodScheduled, any read of the store's subjects, and any
// stream management.
func TestClientRoleIsLockedDown(t *testing.T) {
	srv := bustest.Server(t)
	admin := bustest.Connect(t, srv, "admin")
	bustest.Provision(t, admin)
	client, ok := srv.Creds().User(bus.RoleClient)
	if !ok {
		t.Fatal("no client user in the generated credentials")
	}
	cc := bus.DefaultConfig()
	cc.URLs, cc.User, cc.Password, cc.Name = []string{srv.ClientURL()}, client.User, client.Password, "locked-client"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// A refused publish never gets its PubAck, so it waits out the
	// timeout; an allowed one gets the whole timeout a loaded machine may
	// need.
	send := func(env *eventsv1.Envelope, timeout time.Duration) error {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := conn.Publish(pctx, env)
		return err
	}
	req, _ := bus.NewEnvelope(&eventsv1.PodRequested{})
	req.RequestId, req.Namespace, req.PodName = "r1", "default", "web"
	if err := send(req, bustest.Timeout); err != nil {
		t.Fatalf("the client may publish PodRequested: %v", err)
	}
	forged := []*eventsv1.Envelope{}
	for _, p := range []proto.Message{&eventsv1.PodAdmitted{}, &eventsv1.PodScheduled{NodeName: "n1"}} {
		env := &eventsv1.Envelope{RequestId: "r2", PodUid: "u2", Namespace: "default", PodName: "web", NodeName: "n1"}
		if err := bus.SetPayload(env, p); err != nil {
			t.Fatal(err)
		}
		forged = append(forged, env)
	}
	for _, env := range forged {
		if err := send(env, 2*time.Second); err == nil {
			t.Errorf("the server accepted a forged %s from the client", env.Type())
		}
	}
	// The stream holds the PodRequested only.
	s, err := admin.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("the events stream holds %d messages, want only the PodRequested", info.State.Msgs)
	}
	// No store: reading Secrets through podflow.store.> is refused.
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	if _, err := conn.NATS().RequestWithContext(rctx, "podflow.store.read", []byte("x")); err == nil {
		t.Error("the client reached the store's subjects")
	}
	// Its own replies only: not the store's answers to the stages.
	if _, err := conn.NATS().SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	if err := conn.NATS().FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "the server to refuse a subscription to every inbox", func() bool {
		err := conn.NATS().LastError()
		return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"_INBOX.>"`)
	})
	if !strings.HasPrefix(conn.NATS().NewInbox(), bus.InboxPrefix(bus.RoleClient)+".") {
		t.Errorf("the client's inboxes are %q, want under %q", conn.NATS().NewInbox(), bus.InboxPrefix(bus.RoleClient))
	}
	// No stream management.
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	if _, err := conn.JetStream().CreateOrUpdateStream(sctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}}); err == nil {
		t.Error("the client created a stream")
	}
}

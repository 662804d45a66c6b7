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

// refusedSubscription waits for the server to refuse conn's subscription
// to subject.
func refusedSubscription(t *testing.T, conn *bus.Conn, subject string) {
	t.Helper()
	if err := conn.NATS().FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "the server to refuse a subscription to "+subject, func() bool {
		err := conn.NATS().LastError()
		return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`)
	})
}

// refusal runs op with a context that ends after 2s, or as soon as the
// server has told conn that it refused a publish to subject (a
// permissions violation naming it): a refused publish or request never
// gets its answer, and the server's word ends the wait instead of the
// timeout. It returns op's error: nil if op got its answer.
func refusal(ctx context.Context, conn *bus.Conn, subject string, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- op(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if err := conn.NATS().LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				cancel()
			}
		}
	}
}

// TestUserIsLockedDown: a user's own bus identity may ask the api front
// door and nothing else: the server refuses its PodRequested onto the
// stream (a pod enters through the api stage, which bounds each user's
// intake), a forged PodAdmitted or PodScheduled, any read of the store's
// subjects, any stream management and a subscription to every inbox.
func TestUserIsLockedDown(t *testing.T) {
	srv := bustest.Server(t)
	admin := bustest.Connect(t, srv, "admin")
	bustest.Provision(t, admin)
	if _, ok := srv.Creds().User("client"); ok {
		t.Fatal("the shared client user still exists")
	}
	conn := bustest.ConnectUser(t, srv, "alice", "alice-cli")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A refused publish never gets its PubAck.
	send := func(env *eventsv1.Envelope) error {
		return refusal(ctx, conn, bus.Subject(env), func(ctx context.Context) error {
			_, err := conn.Publish(ctx, env)
			return err
		})
	}
	for _, p := range []proto.Message{&eventsv1.PodRequested{}, &eventsv1.PodAdmitted{}, &eventsv1.PodScheduled{NodeName: "n1"}} {
		env := &eventsv1.Envelope{RequestId: "r2", PodUid: "u2", Namespace: "default", PodName: "web", NodeName: "n1"}
		if err := bus.SetPayload(env, p); err != nil {
			t.Fatal(err)
		}
		if err := send(env); err == nil {
			t.Errorf("the server accepted a %s from a user", env.Type())
		}
	}
	s, err := admin.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("the events stream holds %v messages (%v), want none", info.State.Msgs, err)
	}
	// The front door: a request on podflow.api.> reaches its server.
	front, err := admin.NATS().SubscribeSync(bus.APIPrefix + ".pods.create")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := conn.NATS().PublishRequest(bus.APIPrefix+".pods.create", conn.NATS().NewInbox(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if m, err := front.NextMsg(bustest.Timeout); err != nil || !strings.HasPrefix(m.Reply, bus.UserInbox("alice")+".") {
		t.Fatalf("the front door got %v (%v), want a request answering into %s", m, err, bus.UserInbox("alice"))
	}
	// No store: reading Secrets through podflow.store.> is refused.
	if err := refusal(ctx, conn, "podflow.store.read", func(ctx context.Context) error {
		_, err := conn.NATS().RequestWithContext(ctx, "podflow.store.read", []byte("x"))
		return err
	}); err == nil {
		t.Error("a user reached the store's subjects")
	}
	if _, err := conn.NATS().SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	refusedSubscription(t, conn, "_INBOX.>")
	// No stream management (CreateOrUpdateStream asks for an update first).
	if err := refusal(ctx, conn, "$JS.API.STREAM.UPDATE.EVIL", func(ctx context.Context) error {
		_, err := conn.JetStream().CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
		return err
	}); err == nil {
		t.Error("a user created a stream")
	}
}

// TestUsersReadOnlyTheirOwnReplies (issue 38, item 3): alice and bob each
// have a bus identity; bob, holding valid credentials, subscribes to
// alice's inbox and to every inbox: the server refuses both, and an
// answer into alice's inbox reaches alice alone.
func TestUsersReadOnlyTheirOwnReplies(t *testing.T) {
	srv := bustest.Server(t)
	admin := bustest.Connect(t, srv, "admin")
	alice := bustest.ConnectUser(t, srv, "alice", "alice-cli")
	bob := bustest.ConnectUser(t, srv, "bob", "bob-cli")
	if !strings.HasPrefix(alice.NATS().NewInbox(), bus.UserInbox("alice")+".") {
		t.Fatalf("alice's inboxes are %q, want under %q", alice.NATS().NewInbox(), bus.UserInbox("alice"))
	}
	mine, err := alice.NATS().SubscribeSync(bus.UserInbox("alice") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	var bobs []*nats.Subscription
	for _, subject := range []string{bus.UserInbox("alice") + ".>", "_INBOX.>"} {
		sub, err := bob.NATS().SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		bobs = append(bobs, sub)
		refusedSubscription(t, bob, subject)
	}
	// The api stage's answer to alice (published here by the admin).
	if err := admin.NATS().Publish(bus.UserInbox("alice")+".req1", []byte("alice's secret")); err != nil {
		t.Fatal(err)
	}
	if m, err := mine.NextMsg(bustest.Timeout); err != nil || string(m.Data) != "alice's secret" {
		t.Fatalf("alice's answer: %v %v", m, err)
	}
	// Nothing of it reached bob: alice's answer was delivered before this
	// flush of bob's connection returned, had bob been subscribed.
	if err := bob.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	for _, sub := range bobs {
		if n, _, _ := sub.Pending(); n != 0 {
			t.Errorf("bob's subscription to %s received %d of alice's messages", sub.Subject, n)
		}
	}
}

// TestUserAddedAndRemovedLive: a user added to the credentials file of a
// running server may connect once the server's watch reloads it; a
// removed one is disconnected, and its credentials no longer work.
func TestUserAddedAndRemovedLive(t *testing.T) {
	srv := bustest.Server(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.WatchCredentials(ctx, 20*time.Millisecond, func(err error) { t.Error(err) })
	}()
	defer func() { cancel(); <-done }()
	u, err := bus.AddUser(srv.CredsFile(), "carol")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := bus.AddUser(srv.CredsFile(), "carol"); err != nil || again.Password != u.Password {
		t.Fatalf("adding carol again: %v %+v, want her credential unchanged", err, again)
	}
	cfg := bus.DefaultConfig()
	cfg.URLs, cfg.User, cfg.Password, cfg.MaxReconnects, cfg.Name = []string{srv.ClientURL()}, u.User, u.Password, 0, "carol"
	cctx, ccancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer ccancel()
	conn, err := bus.Connect(cctx, cfg) // retries until the watch reloaded
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := bus.RemoveUser(srv.CredsFile(), "carol"); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "carol's connection to be closed", func() bool { return !conn.NATS().IsConnected() })
	if err := bus.RemoveUser(srv.CredsFile(), "carol"); !errors.Is(err, bus.ErrNoSuchUser) {
		t.Fatalf("removing carol twice: %v", err)
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(u.User, u.Password))
	if err == nil {
		nc.Close()
		t.Fatal("carol's removed credentials still connect")
	}
}

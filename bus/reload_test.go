package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
)

// TestSystemUserAndReload: a server with a system user takes no client
// without credentials (nats-server would otherwise add a user without a
// password to the global account), takes the system user, and takes a
// user added to its credentials file once reloaded.
func TestSystemUserAndReload(t *testing.T) {
	cfg := bus.DefaultEmbeddedConfig(t.TempDir())
	cfg.Port, cfg.SystemPassword = -1, "s3cret"
	srv := bustest.ServerAt(t, cfg)
	// A client without credentials may do nothing (nats-server would let
	// it do everything).
	anon := func(when string) {
		t.Helper()
		nc, err := nats.Connect(srv.ClientURL(), nats.Timeout(2*time.Second))
		if err != nil {
			return
		}
		defer nc.Close()
		sub, _ := nc.SubscribeSync("podflow.>")
		_ = nc.Publish("podflow.pod.x", []byte("x"))
		_ = nc.Flush()
		time.Sleep(100 * time.Millisecond)
		if _, err := sub.NextMsg(200 * time.Millisecond); err == nil || !errors.Is(nc.LastError(), nats.ErrPermissionViolation) {
			t.Fatalf("%s: a client without credentials publishes and subscribes (%v)", when, nc.LastError())
		}
	}
	anon("at start")
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(bus.SystemUser, "s3cret"))
	if err != nil {
		t.Fatalf("the system user: %v", err)
	}
	nc.Close()
	role := bus.RoleSpec{Role: "node-late", Permissions: &bus.Permissions{Publish: &bus.SubjectPermission{Allow: []string{"x"}}}}
	if _, err := bus.EnsureCredentials(srv.CredsFile(), []bus.RoleSpec{role}); err != nil {
		t.Fatal(err)
	}
	cc, err := srv.ClientConfigAs("node-late", "late")
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cc.MaxReconnects = 0
		if c, err := bus.Connect(ctx, cc); err == nil {
			c.Close()
			t.Fatal("a user added to the file connected before the reload")
		}
	}
	if err := srv.ReloadCredentials(); err != nil {
		t.Fatal(err)
	}
	creds, err := bus.LoadCredentials(srv.CredsFile())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := creds.User("node-late")
	nc, err = nats.Connect(srv.ClientURL(), nats.UserInfo(u.User, u.Password))
	if err != nil {
		t.Fatalf("a user added to the file, after the reload: %v", err)
	}
	nc.Close()
	anon("after a reload")
	if nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(bus.SystemUser, "s3cret")); err != nil {
		t.Fatalf("the system user after the reload: %v", err)
	} else {
		nc.Close()
	}
}

// TestJetStreamPeerID: the peer ID computed from a server's name is the
// one nats-server gives that server's JetStream meta group node.
func TestJetStreamPeerID(t *testing.T) {
	for _, name := range []string{"h1-seed", "podflow-host-with-a-longer-name"} {
		cfg := bus.DefaultEmbeddedConfig(t.TempDir())
		cfg.Port, cfg.ServerName, cfg.SystemPassword = -1, name, "s3cret"
		srv := bustest.ServerAt(t, cfg)
		if got, want := bus.JetStreamPeerID(name), srv.Server().Node(); got != want || len(got) != 8 {
			t.Errorf("JetStreamPeerID(%q) = %q, the server's node is %q", name, got, want)
		}
	}
}

// Package bustest starts real NATS JetStream servers for tests of code
// built on package bus: an embedded nats-server on a random loopback
// port with its data under t.TempDir(), torn down by t.Cleanup.
//
// Usage:
//
//	srv := bustest.Server(t)
//	conn := bustest.Connect(t, srv, "scheduler-1")
//	bustest.Provision(t, conn, rc.ConsumerSpec())
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
)

// Timeout bounds every helper's blocking call.
const Timeout = 20 * time.Second

// Server starts an embedded server in a fresh temporary directory and
// shuts it down when the test ends.
func Server(t testing.TB) *bus.Embedded {
	t.Helper()
	return ServerAt(t, bus.DefaultEmbeddedConfig(t.TempDir()))
}

// ServerAt starts an embedded server with cfg and shuts it down when the
// test ends (Shutdown is idempotent: the test may stop it earlier).
func ServerAt(t testing.TB, cfg bus.EmbeddedConfig) *bus.Embedded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	srv, err := bus.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatalf("start embedded server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Connect connects to srv as its admin user and closes the connection
// when the test ends.
func Connect(t testing.TB, srv *bus.Embedded, name string) *bus.Conn {
	t.Helper()
	return ConnectAs(t, srv, bus.RoleAdmin, name)
}

// ConnectAs connects to srv as the user of role (see
// bus.EmbeddedConfig.Roles) and closes the connection when the test ends.
func ConnectAs(t testing.TB, srv *bus.Embedded, role, name string) *bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cfg, err := srv.ClientConfigAs(role, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DrainTimeout = 2 * time.Second
	conn, err := bus.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect %q as %q: %v", name, role, err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// ConnectUser gives apiUser its own bus user on srv (bus.AddUser, then a
// reload of the server's credentials) and connects as it.
func ConnectUser(t testing.TB, srv *bus.Embedded, apiUser, name string) *bus.Conn {
	t.Helper()
	if _, err := bus.AddUser(srv.CredsFile(), apiUser); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadCredentials(); err != nil {
		t.Fatal(err)
	}
	return ConnectAs(t, srv, bus.UserRole(apiUser), name)
}

// Provision creates the default streams (single replica) and consumers.
func Provision(t testing.TB, conn *bus.Conn, consumers ...bus.ConsumerSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	topo := bus.Topology{Streams: bus.DefaultStreams(bus.DefaultStreamsConfig()), Consumers: consumers}
	if err := bus.Provision(ctx, conn.JetStream(), topo); err != nil {
		t.Fatalf("provision: %v", err)
	}
}

// Eventually polls cond every 20ms until it holds or Timeout passes.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", Timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

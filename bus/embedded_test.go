package bus_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
)

func TestEmbeddedRestartKeepsStreamAndCredentials(t *testing.T) {
	dir := t.TempDir()
	cfg := bus.DefaultEmbeddedConfig(dir)
	srv := bustest.ServerAt(t, cfg)
	creds := srv.Creds()
	admin := creds.Admin()
	if admin.User == "" || len(admin.Password) < 20 {
		t.Fatalf("weak or missing admin credential: %+v", admin)
	}
	fi, err := os.Stat(filepath.Join(dir, bus.CredsFileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("creds file mode %v, want 0600", fi.Mode().Perm())
	}

	conn := bustest.Connect(t, srv, "restart-test")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	ack, err := conn.Publish(ctx, podEvent("u1", "web", 1))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	conn.Close()
	srv.Shutdown()
	srv.Shutdown() // idempotent

	srv2 := bustest.ServerAt(t, cfg)
	if srv2.Creds().Admin() != admin {
		t.Fatalf("credentials changed across restart: %+v vs %+v", srv2.Creds().Admin(), admin)
	}
	conn2 := bustest.Connect(t, srv2, "restart-test-2")
	st, err := conn2.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatalf("stream lost across restart: %v", err)
	}
	raw, err := st.GetMsg(ctx, ack.Sequence)
	if err != nil {
		t.Fatalf("message %d lost across restart: %v", ack.Sequence, err)
	}
	env, err := bus.DecodeEnvelope(raw.Data)
	if err != nil || env.PodUid != "u1" {
		t.Fatalf("stored message decodes to %v, %v", env, err)
	}
	// The dedup window survives too: the same event is a duplicate.
	again, err := conn2.Publish(ctx, podEvent("u1", "web", 1))
	if err != nil || !again.Duplicate {
		t.Fatalf("republish after restart: ack %+v, err %v; want duplicate", again, err)
	}
}

func TestEmbeddedRequiresCredentials(t *testing.T) {
	srv := bustest.Server(t)
	for _, opts := range [][]nats.Option{
		nil,
		{nats.UserInfo("admin", "wrong")},
	} {
		nc, err := nats.Connect(srv.ClientURL(), append(opts, nats.MaxReconnects(0))...)
		if err == nil {
			nc.Close()
			t.Fatalf("connected with options %v, want authorization error", opts)
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("connect error %v, want ErrAuthorization", err)
		}
	}
}

func TestClientConfigFile(t *testing.T) {
	srv := bustest.Server(t)
	path := filepath.Join(t.TempDir(), "client.json")
	if err := srv.WriteClientConfig(path); err != nil {
		t.Fatal(err)
	}
	cfg, err := bus.ReadClientConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = "from-file"
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	conn, err := bus.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect with written config: %v", err)
	}
	defer conn.Close()

	// The credentials file works as well.
	cfg2 := bus.DefaultConfig()
	cfg2.URLs, cfg2.CredsFile = []string{srv.ClientURL()}, srv.CredsFile()
	conn2, err := bus.Connect(ctx, cfg2)
	if err != nil {
		t.Fatalf("connect with creds file: %v", err)
	}
	conn2.Close()
	conn2.Close() // idempotent
}

func TestConnectHonoursContext(t *testing.T) {
	// Nothing listens on this address: Connect retries until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	cfg := bus.DefaultConfig()
	cfg.URLs = []string{"nats://127.0.0.1:1"}
	cfg.ReconnectWait = 50 * time.Millisecond
	_, err := bus.Connect(ctx, cfg)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect error %v, want deadline exceeded", err)
	}
}

func TestConnReconnectsAcrossServerRestart(t *testing.T) {
	dir := t.TempDir()
	srv := bustest.ServerAt(t, bus.DefaultEmbeddedConfig(dir))
	conn := bustest.Connect(t, srv, "reconnect")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	if _, err := conn.Publish(ctx, podEvent("u1", "web", 1)); err != nil {
		t.Fatal(err)
	}
	port := srv.Server().Addr().(*net.TCPAddr).Port
	srv.Shutdown()
	bustest.Eventually(t, "the client to notice", func() bool { return !conn.NATS().IsConnected() })

	cfg := bus.DefaultEmbeddedConfig(dir)
	cfg.Port = port
	bustest.ServerAt(t, cfg)
	// The same Conn reconnects on its own and publishes again.
	ack, err := conn.Publish(ctx, podEvent("u2", "web", 1))
	if err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
	if ack.Sequence != 2 || ack.Duplicate {
		t.Fatalf("ack after restart %+v, want sequence 2", ack)
	}
}

// TestRoleCredentials: declared roles get a user each, whose password
// survives restarts while its permissions follow the current declaration;
// a role user may only do what its permissions say.
func TestRoleCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), "creds.json")
	v1 := []bus.RoleSpec{{Role: "reader", Permissions: &bus.Permissions{
		Publish: &bus.SubjectPermission{Allow: []string{"a.>"}},
	}}}
	c1, err := bus.EnsureCredentials(path, v1)
	if err != nil {
		t.Fatal(err)
	}
	u1, ok := c1.User("reader")
	if !ok || len(u1.Password) < 20 || u1.Permissions.Publish.Allow[0] != "a.>" {
		t.Fatalf("reader user: %+v", u1)
	}
	v2 := []bus.RoleSpec{{Role: "reader", Permissions: &bus.Permissions{
		Publish: &bus.SubjectPermission{Allow: []string{"b.>"}},
	}}}
	cfg := bus.DefaultEmbeddedConfig(t.TempDir())
	cfg.CredsPath, cfg.Roles = path, v2
	srv := bustest.ServerAt(t, cfg)
	u2, _ := srv.Creds().User("reader")
	if u2.Password != u1.Password {
		t.Error("the reader's password changed across restarts")
	}
	if got := u2.Permissions.Publish.Allow; len(got) != 1 || got[0] != "b.>" {
		t.Errorf("the reader's permissions are %v, want the current declaration [b.>]", got)
	}
	if c, _ := srv.Creds().User(bus.RoleAdmin); c.Password != c1.Admin().Password {
		t.Error("the admin's password changed")
	}
	conn := bustest.ConnectAs(t, srv, "reader", "reader")
	nc := conn.NATS()
	if err := nc.Publish("b.x", nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("a.x", nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "the server to refuse a.x", func() bool {
		return errors.Is(nc.LastError(), nats.ErrPermissionViolation)
	})

	for _, bad := range [][]bus.RoleSpec{
		{{Role: "admin", Permissions: &bus.Permissions{}}},
		{{Role: "a.b", Permissions: &bus.Permissions{}}},
		{{Role: "open"}},
		{{Role: "x", Permissions: &bus.Permissions{}}, {Role: "x", Permissions: &bus.Permissions{}}},
	} {
		cfg := bus.DefaultEmbeddedConfig(t.TempDir())
		cfg.Roles = bad
		if err := cfg.Validate(); err == nil {
			t.Errorf("roles %+v accepted", bad)
		}
	}
}

// TestEmbeddedRoutesWithoutSharedMatchCache: the server matches every
// subject afresh (NoSublistCache) rather than filling a shared cache with
// subjects that are mostly seen once — events named after their pod, acks
// after their delivery, replies after their request.
func TestEmbeddedRoutesWithoutSharedMatchCache(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "cache")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	for _, env := range podEvents(8) {
		if _, err := conn.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	sz, err := srv.Server().Subsz(nil)
	if err != nil {
		t.Fatal(err)
	}
	if sz.NumMatches == 0 {
		t.Fatal("the server matched no subject")
	}
	if sz.NumCache != 0 {
		t.Fatalf("the server caches %d match results after %d matches, want none", sz.NumCache, sz.NumMatches)
	}
}

package client_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/services/pipeline"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, c client.Config) string {
		p := filepath.Join(dir, name)
		if err := client.WriteConfig(p, c); err != nil {
			t.Fatal(err)
		}
		return p
	}
	abs := write("abs.json", client.Config{NATS: "/x/client.json", Token: "tok", DataDir: dir})
	rel := write("rel.json", client.Config{NATS: "nats/client.json", Token: "tok"})
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		path     string
		env      map[string]string
		wantNATS string
		wantErr  bool
	}{
		{name: "absolute bus file kept", path: abs, wantNATS: "/x/client.json"},
		{name: "relative bus file beside the config", path: rel, wantNATS: filepath.Join(dir, "nats/client.json")},
		{name: "PODFLOW_NATS_CONFIG overrides", path: abs, env: map[string]string{client.NATSConfigEnv: "/role.json"}, wantNATS: "/role.json"},
		{name: "PODFLOW_CONFIG without a path", env: map[string]string{client.ConfigEnv: abs}, wantNATS: "/x/client.json"},
		{name: "explicit path missing", path: filepath.Join(dir, "none.json"), wantErr: true},
		{name: "not JSON", path: bad, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(client.ConfigEnv, "")
			t.Setenv(client.NATSConfigEnv, "")
			t.Setenv("HOME", t.TempDir())
			t.Chdir(t.TempDir())
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := client.LoadConfig(tc.path)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("LoadConfig(%q) = %+v, want an error", tc.path, c)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.NATS != tc.wantNATS || c.Token != "tok" {
				t.Fatalf("LoadConfig(%q) = %+v, want NATS %q and token tok", tc.path, c, tc.wantNATS)
			}
		})
	}
}

func TestLoadConfigNoneFound(t *testing.T) {
	t.Setenv(client.ConfigEnv, "")
	t.Setenv("HOME", t.TempDir())
	t.Chdir(t.TempDir())
	if _, err := client.LoadConfig(""); err == nil {
		t.Fatal("LoadConfig found a configuration in an empty directory")
	}
}

func TestStoreClientConfig(t *testing.T) {
	for _, tc := range []struct{ busUser, storeUser string }{
		{bus.RoleAdmin, ""},
		{pipeline.StageRole(pipeline.Scheduler), pipeline.StageRole(pipeline.Scheduler)},
	} {
		t.Run(tc.busUser, func(t *testing.T) {
			if got := client.StoreClientConfig(tc.busUser).User; got != tc.storeUser {
				t.Fatalf("store user of bus user %q = %q, want %q", tc.busUser, got, tc.storeUser)
			}
		})
	}
}

func TestToken(t *testing.T) {
	s := client.New(client.Config{Token: "admin"}, nil, nil)
	if got := s.Token(""); got != "admin" {
		t.Fatalf("Token(\"\") = %q, want the configuration's", got)
	}
	if got := s.Token("mine"); got != "mine" {
		t.Fatalf("Token(mine) = %q", got)
	}
}

// TestOpen connects to an embedded NATS server through a written
// configuration, the way every client command does.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	cfg := bus.DefaultEmbeddedConfig(filepath.Join(dir, "nats"))
	cfg.Port = -1
	srv, err := bus.StartEmbedded(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	natsFile := filepath.Join(dir, "client.json")
	if err := srv.WriteClientConfig(natsFile); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	if err := client.WriteConfig(path, client.Config{NATS: "client.json", Token: "tok", DataDir: dir}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(client.NATSConfigEnv, "")
	sess, err := client.Open(context.Background(), path, "client-test")
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if sess.Bus.Name() != "client-test" || sess.Config.DataDir != dir || sess.Store == nil {
		t.Fatalf("session %q %+v", sess.Bus.Name(), sess.Config)
	}
	if !sess.Bus.NATS().IsConnected() {
		t.Fatal("not connected")
	}
}

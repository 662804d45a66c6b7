// Package clienttest starts what a client command needs to open a session
// in tests: an embedded NATS server and a client configuration naming it.
package clienttest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
)

// Config starts an embedded NATS server (stopped when t ends) in dir,
// writes its client file there and cfg, with NATS naming that file, as
// dir/config.json, and returns that path. PODFLOW_NATS_CONFIG is cleared
// for t, so the configuration's NATS file is the one used.
func Config(t testing.TB, dir string, cfg client.Config) string {
	t.Helper()
	ecfg := bus.DefaultEmbeddedConfig(filepath.Join(dir, "nats"))
	ecfg.Port = -1
	srv, err := bus.StartEmbedded(context.Background(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	if err := srv.WriteClientConfig(filepath.Join(dir, "client.json")); err != nil {
		t.Fatal(err)
	}
	cfg.NATS = "client.json"
	path := filepath.Join(dir, "config.json")
	if err := client.WriteConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	t.Setenv(client.NATSConfigEnv, "")
	return path
}

package roles

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/pipeline"
)

// NATS runs the embedded NATS JetStream server of cfg until ctx is done,
// with one restricted user per process role (services/pipeline). With
// clientConfig set it writes the URL and admin credentials there once
// listening (`podflow up` waits for that file), with tlsFiles (the CA and
// a client certificate) for a server with TLS.
func NATS(ctx context.Context, cfg bus.EmbeddedConfig, clientConfig string, tlsFiles bus.TLSFiles) error {
	if cfg.DataDir == "" {
		return fmt.Errorf("--data-dir is required")
	}
	cfg.Roles = pipeline.Roles()
	cfg.SystemPassword = os.Getenv(SystemPasswordEnv)
	srv, err := bus.StartEmbedded(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	// Users added or removed (`podflow config bus-user`, a host joining a
	// cluster of several machines) take effect without a restart.
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.WatchCredentials(ctx, time.Second, func(err error) { fmt.Fprintf(os.Stderr, "nats: credentials: %v\n", err) })
	}()
	defer func() { <-done }() // ctx is done: the watch has stopped
	if clientConfig != "" {
		if err := os.MkdirAll(filepath.Dir(clientConfig), 0o755); err != nil {
			return err
		}
		if err := bus.WriteClientConfigTLS(clientConfig, []string{srv.ClientURL()}, srv.Creds().Admin(), tlsFiles); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "nats: listening on %s (data %s)\n", srv.ClientURL(), cfg.DataDir)
	<-ctx.Done()
	return nil
}

// SystemPasswordEnv names the password of the system account's user
// (bus.SystemUser) of a NATS server `podflow up` runs on a host of
// several: it removes a retired server's JetStream peer.
const SystemPasswordEnv = "PODFLOW_NATS_SYSTEM_PASSWORD"

// NATSTLS is a NATS server's TLS: for clients any certificate of the CA
// (their password names the user), for routes only the NATS servers'
// (bus.ServerGroup).
func NATSTLS(f bus.TLSFiles) (clients, routes *tls.Config, err error) {
	files := raftstore.TLSFiles{CertFile: f.CertFile, KeyFile: f.KeyFile, CAFile: f.CAFile}
	if clients, err = raftstore.MutualTLS(files, ""); err != nil {
		return nil, nil, err
	}
	if routes, err = raftstore.MutualTLS(files, bus.ServerGroup); err != nil {
		return nil, nil, err
	}
	return clients, routes, nil
}

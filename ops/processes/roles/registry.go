package roles

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podflow/podflow/nodeagent/linux/image/registry"
)

// Registry serves the OCI registry of cfg until ctx is done. With addrFile
// set it writes the address it listens on there once listening.
func Registry(ctx context.Context, cfg registry.Config, addrFile string) error {
	if cfg.Dir == "" {
		return fmt.Errorf("--data-dir is required")
	}
	srv, err := registry.New(cfg)
	if err != nil {
		return err
	}
	if addrFile != "" {
		if err := writeAddrFile(addrFile, srv.Addr()); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "registry: listening on %s (data %s)\n", srv.Addr(), cfg.Dir)
	return srv.Serve(ctx)
}

// writeAddrFile writes addr to path atomically, so a reader never sees a
// partial address.
func writeAddrFile(path, addr string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

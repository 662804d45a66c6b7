package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/nodeagent/linux/image/registry"
)

func init() { register(newRegistryCmd) }

func newRegistryCmd() *cobra.Command {
	cfg := registry.DefaultConfig("")
	var addrFile string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Serve an OCI image registry on loopback for the node agents",
		Long: `Serve an OCI distribution registry on a loopback address, persisted under
--data-dir: blobs on disk, manifests journaled to disk and replayed at start,
so pushed images survive a restart. Node agents use it as the mirror of
docker.io; ` + "`podflow images push`" + ` loads podflow's test images into it.`,
		Example: `  podflow registry --data-dir .podflow/registry --addr 127.0.0.1:5000 --addr-file .podflow/registry.addr
  podflow images push --registry-file .podflow/registry.addr --httpserver bin/httpserver --busybox /bin/busybox`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Dir == "" {
				return fmt.Errorf("--data-dir is required")
			}
			if verbose {
				cfg.Log = log.New(os.Stderr, "registry: ", log.LstdFlags)
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
			return srv.Serve(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "data-dir", "", "directory of the registry's blobs and manifests (required)")
	f.StringVar(&cfg.Addr, "addr", "127.0.0.1:5000", "loopback address to listen on (port 0 picks a free one)")
	f.StringVar(&addrFile, "addr-file", "", "write the address listened on to this file once listening")
	f.BoolVarP(&verbose, "verbose", "v", false, "log every request to stderr")
	return cmd
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

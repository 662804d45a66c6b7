package main

import (
	"log"
	"os"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/nodeagent/linux/image/registry"
	"github.com/podflow/podflow/ops/processes/roles"
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
			if verbose {
				cfg.Log = log.New(os.Stderr, "registry: ", log.LstdFlags)
			}
			return roles.Registry(cmd.Context(), cfg, addrFile)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "data-dir", "", "directory of the registry's blobs and manifests (required)")
	f.StringVar(&cfg.Addr, "addr", "127.0.0.1:5000", "loopback address to listen on (port 0 picks a free one)")
	f.StringVar(&addrFile, "addr-file", "", "write the address listened on to this file once listening")
	f.BoolVarP(&verbose, "verbose", "v", false, "log every request to stderr")
	return cmd
}

package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/processes/up"
)

func init() { register(newImagesCmd) }

func newImagesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Build podflow's test images and load them into a registry",
	}
	cmd.AddCommand(newImagesPushCmd())
	return cmd
}

func newImagesPushCmd() *cobra.Command {
	o := &up.PushOptions{}
	cmd := &cobra.Command{
		Use:   "push",
		Short: "Assemble the test images from binaries and push them",
		Long: `Assemble podflow's test images as OCI images, without Docker, and push them to
a registry on loopback:

  podflow/http:1 and library/nginx:latest   the HTTP server (--httpserver, built
                                            from images/httpserver by make images)
  podflow/busybox:1 and library/busybox:latest
                                            Debian's busybox-static (--busybox)

library/nginx:latest lets the seed's nginx pod run offline: node agents use the
registry as the mirror of docker.io. Builds are reproducible: pushing the same
binaries again gives the same digests.`,
		Example: `  make images   # builds bin/httpserver, then runs:
  podflow images push --registry-dir .podflow/registry --httpserver bin/httpserver --busybox /bin/busybox
  podflow images push --registry-file .podflow/registry.addr   # a running podflow registry`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Out = cmd.OutOrStdout()
			return up.PushImages(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Registry, "registry", "", "registry address (127.0.0.1:PORT)")
	f.StringVar(&o.RegistryFile, "registry-file", "", "read the registry address from this file (written by podflow registry --addr-file)")
	f.StringVar(&o.RegistryDir, "registry-dir", "", "no registry running: serve this registry data directory in-process while pushing (what 'podflow registry --data-dir' will serve)")
	f.StringVar(&o.HTTPServer, "httpserver", "", "static binary of images/httpserver (default: httpserver beside this podflow executable; \"-\" skips the HTTP server images)")
	f.StringVar(&o.Busybox, "busybox", "/bin/busybox", "static busybox binary, Debian's busybox-static (\"-\" skips the busybox images)")
	f.DurationVar(&o.Timeout, "timeout", 60*time.Second, "give up when the registry is not reachable and pushed within this time")
	return cmd
}

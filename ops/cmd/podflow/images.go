package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
	"github.com/podflow/podflow/nodeagent/linux/image/registry"
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

type imagesPushOptions struct {
	registry     string
	registryFile string
	registryDir  string
	httpserver   string
	busybox      string
	timeout      time.Duration
}

func newImagesPushCmd() *cobra.Command {
	o := &imagesPushOptions{}
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
			return runImagesPush(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.registry, "registry", "", "registry address (127.0.0.1:PORT)")
	f.StringVar(&o.registryFile, "registry-file", "", "read the registry address from this file (written by podflow registry --addr-file)")
	f.StringVar(&o.registryDir, "registry-dir", "", "no registry running: serve this registry data directory in-process while pushing (what `podflow registry --data-dir` will serve)")
	f.StringVar(&o.httpserver, "httpserver", "", "static binary of images/httpserver (default: httpserver beside this podflow executable; \"-\" skips the HTTP server images)")
	f.StringVar(&o.busybox, "busybox", "/bin/busybox", "static busybox binary, Debian's busybox-static (\"-\" skips the busybox images)")
	f.DurationVar(&o.timeout, "timeout", 60*time.Second, "give up when the registry is not reachable and pushed within this time")
	return cmd
}

func runImagesPush(ctx context.Context, o *imagesPushOptions) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if n := btoi(o.registry != "") + btoi(o.registryFile != "") + btoi(o.registryDir != ""); n != 1 {
		return errors.New("exactly one of --registry, --registry-file and --registry-dir is required")
	}
	addr := o.registry
	if o.registryDir != "" {
		srv, err := registry.New(registry.DefaultConfig(o.registryDir))
		if err != nil {
			return err
		}
		sctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- srv.Serve(sctx) }()
		defer func() { stop(); <-done; srv.Close() }()
		addr = srv.Addr()
	}
	if o.registryFile != "" {
		if err := waitFile(ctx, o.registryFile, o.timeout); err != nil {
			return err
		}
		b, err := os.ReadFile(o.registryFile)
		if err != nil {
			return err
		}
		addr = strings.TrimSpace(string(b))
	}
	if o.httpserver == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the httpserver binary: %w (pass --httpserver)", err)
		}
		o.httpserver = filepath.Join(filepath.Dir(exe), "httpserver")
	}
	images := map[string]v1.Image{}
	if o.httpserver != "-" {
		img, err := imagebuild.HTTPServer(o.httpserver)
		if err != nil {
			return fmt.Errorf("%w (build it with `make images`)", err)
		}
		images["podflow/http:1"] = img
		images["library/nginx:latest"] = img
	}
	if o.busybox != "-" {
		img, err := imagebuild.Busybox(ctx, o.busybox)
		if err != nil {
			return fmt.Errorf("%w (install Debian's busybox-static, or pass --busybox -)", err)
		}
		images["podflow/busybox:1"] = img
		images["library/busybox:latest"] = img
	}
	if len(images) == 0 {
		return errors.New("nothing to push: --httpserver and --busybox are both -")
	}
	if err := waitRegistry(ctx, addr); err != nil {
		return err
	}
	if err := imagebuild.Push(ctx, addr, images); err != nil {
		return err
	}
	for _, ref := range slices.Sorted(maps.Keys(images)) {
		d, _ := images[ref].Digest()
		fmt.Printf("%s/%s@%s\n", addr, ref, d)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitRegistry waits until addr answers the registry API's version check.
func waitRegistry(ctx context.Context, addr string) error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("registry %q not ready: %w", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

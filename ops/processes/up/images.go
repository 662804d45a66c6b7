package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
	"github.com/podflow/podflow/nodeagent/linux/image/registry"
)

// PushOptions say which images PushImages builds and where it pushes
// them: exactly one of Registry, RegistryFile and RegistryDir.
type PushOptions struct {
	Registry     string        // a registry's address (127.0.0.1:PORT)
	RegistryFile string        // a file holding it (podflow registry --addr-file)
	RegistryDir  string        // no registry running: serve this data directory in-process while pushing
	HTTPServer   string        // static binary of images/httpserver ("": beside this executable; "-": skip)
	Busybox      string        // static busybox binary ("-": skip)
	Timeout      time.Duration // bounds the whole push
	Out          io.Writer     // where each pushed reference is printed (nil: stdout)
}

// PushImages assembles podflow's test images from binaries, as OCI images
// without Docker, and pushes them to the registry o names
// (`podflow images push`), printing each image's reference and digest.
func PushImages(ctx context.Context, o *PushOptions) error {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if n := btoi(o.Registry != "") + btoi(o.RegistryFile != "") + btoi(o.RegistryDir != ""); n != 1 {
		return errors.New("exactly one of --registry, --registry-file and --registry-dir is required")
	}
	addr := o.Registry
	if o.RegistryDir != "" {
		srv, err := registry.New(registry.DefaultConfig(o.RegistryDir))
		if err != nil {
			return err
		}
		sctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- srv.Serve(sctx) }()
		defer func() { stop(); <-done; srv.Close() }()
		addr = srv.Addr()
	}
	if o.RegistryFile != "" {
		if err := waitFile(ctx, o.RegistryFile, o.Timeout); err != nil {
			return err
		}
		b, err := os.ReadFile(o.RegistryFile)
		if err != nil {
			return err
		}
		addr = strings.TrimSpace(string(b))
	}
	if o.HTTPServer == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the httpserver binary: %w (pass --httpserver)", err)
		}
		o.HTTPServer = filepath.Join(filepath.Dir(exe), "httpserver")
	}
	images := map[string]v1.Image{}
	if o.HTTPServer != "-" {
		img, err := imagebuild.HTTPServer(o.HTTPServer)
		if err != nil {
			return fmt.Errorf("%w (build it with `make images`)", err)
		}
		images["podflow/http:1"] = img
		images["library/nginx:latest"] = img
	}
	if o.Busybox != "-" {
		img, err := imagebuild.Busybox(ctx, o.Busybox)
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
		fmt.Fprintf(o.Out, "%s/%s@%s\n", addr, ref, d)
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

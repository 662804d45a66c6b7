package registry_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.uber.org/goleak"

	"github.com/podflow/podflow/nodeagent/linux/image"
	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
	"github.com/podflow/podflow/nodeagent/linux/image/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start serves a registry on dir until the returned stop is called.
func start(t *testing.T, dir string) (addr string, stop func()) {
	t.Helper()
	srv, err := registry.New(registry.DefaultConfig(dir))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { err := srv.Serve(ctx); srv.Close(); done <- err }() // the lock is free once stop returns
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Serve did not return")
		}
	}
	t.Cleanup(stop)
	return srv.Addr(), stop
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:5000", true}, {"[::1]:0", true}, {"localhost:5000", true},
		{"0.0.0.0:5000", false}, {"192.0.2.2:5000", false}, {":5000", false}, {"127.0.0.1", false},
	} {
		c := registry.DefaultConfig("/tmp/x")
		c.Addr = tt.addr
		if err := c.Validate(); tt.ok != (err == nil) || (err != nil && !errors.Is(err, registry.ErrInvalidConfig)) {
			t.Errorf("Validate(Addr %q) = %v, want ok=%v", tt.addr, err, tt.ok)
		}
	}
}

// TestPersistsAcrossRestart pushes, restarts the registry on the same data
// directory and pulls the same digest; a deleted tag stays deleted.
func TestPersistsAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	addr, stop := start(t, dir)

	l, err := imagebuild.Layer([]imagebuild.Entry{imagebuild.File("hello", 0o644, []byte("world"))})
	if err != nil {
		t.Fatal(err)
	}
	img, err := imagebuild.Image(v1.Config{Cmd: []string{"/hello"}}, l)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if err := imagebuild.Push(ctx, addr, map[string]v1.Image{"podflow/hello:1": img, "podflow/hello:gone": img}); err != nil {
		t.Fatal(err)
	}
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	gone, _ := name.ParseReference(addr + "/podflow/hello:gone")
	if err := remote.Delete(gone, remote.WithTransport(tr)); err != nil {
		t.Fatalf("delete tag: %v", err)
	}
	stop()

	addr2, _ := start(t, dir)
	ref, _ := name.ParseReference(addr2 + "/podflow/hello:1")
	desc, err := remote.Get(ref, remote.WithTransport(tr))
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if desc.Digest != want {
		t.Fatalf("digest after restart %s, want %s", desc.Digest, want)
	}
	gone2, _ := name.ParseReference(addr2 + "/podflow/hello:gone")
	if _, err := remote.Get(gone2, remote.WithTransport(tr)); err == nil {
		t.Fatal("a deleted tag came back after restart")
	}
	// The whole image, layers included, pulls into a node's store.
	s, err := image.NewStore(image.Config{Dir: t.TempDir(), Mirror: addr2, Parallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := s.Pull(ctx, "podflow/hello:1", image.PullAlways)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "rootfs")
	if err := s.Rootfs(ctx, p.ID, dest); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "hello")); string(b) != "world" {
		t.Fatalf("hello = %q", b)
	}
}

func TestCorruptManifestRefused(t *testing.T) {
	dir := t.TempDir()
	addr, stop := start(t, dir)
	l, _ := imagebuild.Layer([]imagebuild.Entry{imagebuild.File("f", 0o644, nil)})
	img, _ := imagebuild.Image(v1.Config{}, l)
	if err := imagebuild.Push(context.Background(), addr, map[string]v1.Image{"x/y:1": img}); err != nil {
		t.Fatal(err)
	}
	// A second server on the same directory is refused while one runs.
	if _, err := registry.New(registry.DefaultConfig(dir)); !errors.Is(err, registry.ErrLocked) {
		t.Fatalf("second New on a served dir = %v, want ErrLocked", err)
	}
	stop()
	d, _ := img.Digest()
	if err := os.WriteFile(filepath.Join(dir, "manifests", "sha256", d.Hex), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.New(registry.DefaultConfig(dir)); !errors.Is(err, registry.ErrCorrupt) {
		t.Fatalf("New on a corrupt dir = %v, want ErrCorrupt", err)
	}
}

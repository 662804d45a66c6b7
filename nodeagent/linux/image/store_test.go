package image_test

import (
	"archive/tar"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"go.uber.org/goleak"

	"github.com/podflow/podflow/nodeagent/linux/image"
	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
	"github.com/podflow/podflow/nodeagent/linux/image/imagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T, dir, mirror string) *image.Store {
	t.Helper()
	cfg := image.DefaultConfig(dir)
	cfg.Mirror = mirror
	s, err := image.NewStore(cfg)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustImage(t *testing.T, cfg v1.Config, layers ...[]imagebuild.Entry) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, es := range layers {
		l, err := imagebuild.Layer(es)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	img, err := imagebuild.Image(cfg, ls...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func smallImage(t *testing.T, content string) v1.Image {
	return mustImage(t, v1.Config{Entrypoint: []string{"/bin/app"}, Cmd: []string{"--serve"}, Env: []string{"A=1"},
		WorkingDir: "/w", User: "65534", ExposedPorts: map[string]struct{}{"8080/tcp": {}}},
		[]imagebuild.Entry{imagebuild.Dir("bin", 0o755), imagebuild.File("bin/app", 0o755, []byte(content))})
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*image.Config)
		ok     bool
	}{
		{"default", func(*image.Config) {}, true},
		{"mirror", func(c *image.Config) { c.Mirror = "127.0.0.1:5000" }, true},
		{"no dir", func(c *image.Config) { c.Dir = "" }, false},
		{"relative dir", func(c *image.Config) { c.Dir = "images" }, false},
		{"no parallelism", func(c *image.Config) { c.Parallelism = 0 }, false},
		{"bad mirror", func(c *image.Config) { c.Mirror = "http://x/y" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := image.DefaultConfig("/var/lib/podflow/images")
			tt.mutate(&c)
			err := c.Validate()
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, image.ErrInvalidConfig)) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// TestPullPolicies walks one store through the pull policies against a
// registry that is stopped half way, proving which policies contact it.
func TestPullPolicies(t *testing.T) {
	ctx := context.Background()
	reg := imagetest.NewRegistry(t)
	img := smallImage(t, "v1")
	reg.Push(t, "library/app:1", img)
	reg.Push(t, "library/app:latest", img)
	digest, _ := img.Digest()
	s := newStore(t, t.TempDir(), reg.Addr)

	// Never, absent.
	_, err := s.Pull(ctx, "app:1", image.PullNever)
	if !errors.Is(err, image.ErrNeverPull) || !errors.Is(err, image.ErrNotPresent) {
		t.Fatalf("Never on an absent image: %v, want ErrImageNeverPull wrapping ErrNotPresent", err)
	}
	// Absent from the registry.
	if _, err := s.Pull(ctx, "app:404", image.PullIfNotPresent); !errors.Is(err, image.ErrPull) {
		t.Fatalf("missing image: %v, want ErrImagePull", err)
	}
	if _, err := s.Pull(ctx, "app:1", "Sometimes"); !errors.Is(err, image.ErrInvalidPolicy) {
		t.Fatalf("bad policy: %v, want ErrInvalidPolicy", err)
	}

	// "" on a versioned tag is IfNotPresent: pulls once.
	p, err := s.Pull(ctx, "app:1", "")
	if err != nil {
		t.Fatal(err)
	}
	want := image.Pulled{
		Ref: "docker.io/library/app:1", ID: "docker.io/library/app@" + digest.String(),
		Config: image.ImageConfig{Entrypoint: []string{"/bin/app"}, Cmd: []string{"--serve"}, Env: []string{"A=1"},
			WorkingDir: "/w", User: "65534", ExposedPorts: []string{"8080/tcp"}},
	}
	if p.Ref != want.Ref || p.ID != want.ID || p.AlreadyPresent || p.SizeBytes <= 0 ||
		strings.Join(p.Config.Entrypoint, " ") != "/bin/app" || strings.Join(p.Config.Cmd, " ") != "--serve" ||
		strings.Join(p.Config.Env, ",") != "A=1" || p.Config.WorkingDir != "/w" || p.Config.User != "65534" ||
		strings.Join(p.Config.ExposedPorts, ",") != "8080/tcp" {
		t.Fatalf("first pull = %+v, want %+v (fresh, size > 0)", p, want)
	}
	// "" on :latest is Always: the registry is asked again.
	before := reg.ManifestGets("library/app")
	if p, err := s.Pull(ctx, "docker.io/library/app", ""); err != nil || p.AlreadyPresent || p.Ref != "docker.io/library/app:latest" {
		t.Fatalf("pull of :latest = %+v, %v", p, err)
	}
	if reg.ManifestGets("library/app") == before {
		t.Fatal("the default policy of :latest did not contact the registry")
	}
	if p, err := s.Pull(ctx, "app:latest", image.PullAlways); err != nil || p.AlreadyPresent {
		t.Fatalf("Always = %+v, %v; want a pull", p, err)
	}

	// With the registry gone, only IfNotPresent and Never succeed.
	reg.Stop()
	requests := reg.Requests()
	for _, policy := range []string{image.PullIfNotPresent, image.PullNever, ""} {
		p, err := s.Pull(ctx, "app:1", policy)
		if err != nil || !p.AlreadyPresent || p.ID != want.ID {
			t.Fatalf("%q with the registry stopped = %+v, %v; want already present", policy, p, err)
		}
	}
	if reg.Requests() != requests {
		t.Fatal("a pull of a present image contacted the registry")
	}
	if _, err := s.Pull(ctx, "app:latest", image.PullAlways); !errors.Is(err, image.ErrPull) {
		t.Fatalf("Always with the registry stopped: %v, want ErrImagePull", err)
	}

	// Images: one image, all its names.
	imgs := s.Images()
	if len(imgs) != 1 || imgs[0].SizeBytes != p.SizeBytes {
		t.Fatalf("Images() = %v", imgs)
	}
	if got := strings.Join(imgs[0].Names, " "); got != "docker.io/library/app:1 docker.io/library/app:latest "+want.ID {
		t.Fatalf("names = %q", got)
	}
}

func TestStoreReopen(t *testing.T) {
	ctx := context.Background()
	reg := imagetest.NewRegistry(t)
	reg.Push(t, "podflow/http:1", smallImage(t, "v2"))
	dir := t.TempDir()
	s := newStore(t, dir, reg.Addr)
	p, err := s.Pull(ctx, "podflow/http:1", "")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.Pull(ctx, "podflow/http:1", image.PullAlways); !errors.Is(err, image.ErrClosed) {
		t.Fatalf("Pull after Close: %v, want ErrClosed", err)
	}
	reg.Stop()

	s2 := newStore(t, dir, reg.Addr)
	got, err := s2.Pull(ctx, "docker.io/podflow/http:1", image.PullNever)
	if err != nil || got.ID != p.ID || !got.AlreadyPresent {
		t.Fatalf("after reopen: %+v, %v; want %s present", got, err, p.ID)
	}
	if _, err := s2.Image(p.ID); err != nil {
		t.Fatalf("Image(by ID): %v", err)
	}
	if err := s2.Rootfs(ctx, "podflow/http:1", filepath.Join(t.TempDir(), "rootfs")); err != nil {
		t.Fatal(err)
	}
	// A layer lost from the content store drops the image from the index.
	s2.Close()
	ents, _ := os.ReadDir(filepath.Join(dir, "layers", "sha256"))
	for _, e := range ents {
		os.Remove(filepath.Join(dir, "layers", "sha256", e.Name()))
	}
	s3 := newStore(t, dir, reg.Addr)
	if _, err := s3.Pull(ctx, "podflow/http:1", image.PullNever); !errors.Is(err, image.ErrNeverPull) {
		t.Fatalf("after losing layers: %v, want ErrImageNeverPull", err)
	}
}

// TestConcurrentPullsDownloadOnce holds the registry's responses until
// every caller is waiting, then checks each blob was fetched once.
func TestConcurrentPullsDownloadOnce(t *testing.T) {
	ctx := context.Background()
	reg := imagetest.NewRegistry(t)
	img := mustImage(t, v1.Config{Cmd: []string{"x"}},
		[]imagebuild.Entry{imagebuild.File("a", 0o644, []byte(strings.Repeat("a", 1<<20)))},
		[]imagebuild.Entry{imagebuild.File("b", 0o644, []byte(strings.Repeat("b", 1<<20)))})
	reg.Push(t, "library/big:1", img)
	s := newStore(t, t.TempDir(), reg.Addr)

	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // a failing test must not leave handlers blocked
	var arrived sync.WaitGroup
	arrived.Add(1)
	var once sync.Once
	reg.OnRequest(func(*http.Request) {
		once.Do(arrived.Done)
		<-release
	})
	const n = 8
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := s.Pull(ctx, "big:1", image.PullAlways)
			errs <- err
		})
	}
	arrived.Wait() // one download is in flight and held
	waitFor(t, func() bool { return s.Waiters("docker.io/library/big:1") == n })
	unblock()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := reg.ManifestGets("library/big"); got != 1 {
		t.Errorf("manifest fetched %d times by %d concurrent pulls, want 1", got, n)
	}
	layers, _ := img.Layers()
	for _, l := range layers {
		d, _ := l.Digest()
		if got := reg.BlobGets(d.String()); got != 1 {
			t.Errorf("layer %s fetched %d times, want 1", d, got)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPullCallerGivingUpDoesNotFailOthers(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	reg.Push(t, "library/slow:1", smallImage(t, "slow"))
	s := newStore(t, t.TempDir(), reg.Addr)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	reg.OnRequest(func(*http.Request) { <-release })

	patient := make(chan error, 1)
	go func() {
		_, err := s.Pull(context.Background(), "slow:1", "")
		patient <- err
	}()
	waitFor(t, func() bool { return s.Waiters("docker.io/library/slow:1") == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := s.Pull(ctx, "slow:1", ""); !errors.Is(err, image.ErrPull) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("impatient pull: %v, want ErrImagePull wrapping DeadlineExceeded", err)
	}
	unblock()
	select {
	case err := <-patient:
		if err != nil {
			t.Fatalf("patient pull failed after another caller gave up: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("patient pull did not finish")
	}
}

func TestRootfsLayersAndWhiteouts(t *testing.T) {
	ctx := context.Background()
	reg := imagetest.NewRegistry(t)
	img := mustImage(t, v1.Config{Cmd: []string{"sh"}},
		[]imagebuild.Entry{
			imagebuild.Dir("etc", 0o755),
			imagebuild.File("etc/keep", 0o600, []byte("keep")),
			imagebuild.File("etc/gone", 0o644, []byte("gone")),
			imagebuild.File("etc/replaced", 0o644, []byte("old")),
			imagebuild.Dir("opq", 0o755),
			imagebuild.File("opq/old", 0o644, []byte("old")),
			imagebuild.Dir("opq/sub", 0o755),
			imagebuild.File("opq/sub/deep", 0o644, []byte("deep")),
			imagebuild.Dir("gonedir", 0o755),
			imagebuild.File("gonedir/f", 0o644, nil),
			imagebuild.Symlink("etc/link", "keep"),
			imagebuild.Symlink("abs", "/etc/keep"),
			imagebuild.Symlink("etcabs", "/etc"),
			imagebuild.Hardlink("etc/hard", "etc/keep"),
			imagebuild.File("implied/parent/file", 0o4755, []byte("suid")),
		},
		[]imagebuild.Entry{
			imagebuild.Whiteout("etc/gone"),
			imagebuild.Whiteout("gonedir"),
			imagebuild.File("etc/replaced", 0o644, []byte("new")),
			imagebuild.File("opq/new-before", 0o644, []byte("n")), // same layer, before the marker: kept
			imagebuild.Opaque("opq"),
			imagebuild.File("opq/new", 0o644, []byte("n")),
			// Through an absolute symlink of layer 1: resolved inside the root.
			imagebuild.File("etcabs/through", 0o644, []byte("inside")),
		})
	reg.Push(t, "library/layers:1", img)
	s := newStore(t, t.TempDir(), reg.Addr)
	if _, err := s.Pull(ctx, "layers:1", ""); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "rootfs")
	if err := s.Rootfs(ctx, "layers:1", dest); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dest, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(dest, p)); return err == nil }
	for _, c := range []struct{ path, want string }{
		{"etc/keep", "keep"}, {"etc/replaced", "new"}, {"opq/new", "n"}, {"opq/new-before", "n"},
		{"etc/link", "keep"}, {"etc/hard", "keep"}, {"implied/parent/file", "suid"},
		{"etc/through", "inside"},
	} {
		if got := read(c.path); got != c.want {
			t.Errorf("%s = %q, want %q", c.path, got, c.want)
		}
	}
	for _, gone := range []string{"etc/gone", "gonedir", "opq/old", "opq/sub", "etc/.wh.gone", "opq/.wh..wh..opq"} {
		if exists(gone) {
			t.Errorf("%s exists after its whiteout", gone)
		}
	}
	if target, err := os.Readlink(filepath.Join(dest, "abs")); err != nil || target != "/etc/keep" {
		t.Errorf("abs -> %q, %v", target, err)
	}
	fi1, _ := os.Stat(filepath.Join(dest, "etc/keep"))
	fi2, _ := os.Stat(filepath.Join(dest, "etc/hard"))
	if !os.SameFile(fi1, fi2) {
		t.Error("etc/hard is not a hard link of etc/keep")
	}
	if fi1.Mode().Perm() != 0o600 {
		t.Errorf("etc/keep mode %v, want 0600", fi1.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(dest, "implied/parent/file")); fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("setuid bit lost: %v", fi.Mode())
	}

	// Idempotent: the marker short-circuits a second call...
	os.WriteFile(filepath.Join(dest, "etc/keep"), []byte("changed"), 0o600)
	if err := s.Rootfs(ctx, "layers:1", dest); err != nil || read("etc/keep") != "changed" {
		t.Fatalf("second Rootfs: %v, etc/keep = %q; want untouched", err, read("etc/keep"))
	}
	// ...and without it the rootfs is unpacked afresh.
	os.Remove(filepath.Join(filepath.Dir(dest), ".rootfs.image"))
	if err := s.Rootfs(ctx, "layers:1", dest); err != nil || read("etc/keep") != "keep" {
		t.Fatalf("Rootfs without marker: %v, etc/keep = %q", err, read("etc/keep"))
	}
	if err := s.Rootfs(ctx, "notpulled:1", filepath.Join(t.TempDir(), "r")); !errors.Is(err, image.ErrRootfs) || !errors.Is(err, image.ErrNotPresent) {
		t.Fatalf("Rootfs of an image not pulled: %v", err)
	}
}

func rawTar(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var b strings.Builder
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("x"))
		}
	}
	tw.Close()
	return []byte(b.String())
}

// TestApplyLayerConfined feeds hostile layers and checks nothing is written
// outside the root.
func TestApplyLayerConfined(t *testing.T) {
	tests := []struct {
		name   string
		hdrs   func(outside string) []*tar.Header
		unsafe bool // refused with ErrUnsafePath
	}{
		{"dotdot name", func(string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeReg, Name: "../pwned"}}
		}, true},
		{"absolute dotdot name", func(string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeReg, Name: "/a/../../pwned"}}
		}, true},
		{"hardlink out", func(outside string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeLink, Name: "pwned", Linkname: "../" + filepath.Base(outside) + "/victim"}}
		}, true},
		{"whiteout with dotdot", func(string) []*tar.Header {
			return []*tar.Header{{Typeflag: tar.TypeReg, Name: "a/../../.wh.victim"}}
		}, true},
		{"absolute symlink then write through it", func(outside string) []*tar.Header {
			return []*tar.Header{
				{Typeflag: tar.TypeSymlink, Name: "evil", Linkname: outside},
				{Typeflag: tar.TypeReg, Name: "evil/pwned"},
			}
		}, false},
		{"relative symlink climbing then write", func(outside string) []*tar.Header {
			return []*tar.Header{
				{Typeflag: tar.TypeSymlink, Name: "up", Linkname: "../../../../../../" + outside},
				{Typeflag: tar.TypeReg, Name: "up/pwned"},
			}
		}, false},
		{"symlink replaced by file writes no target", func(outside string) []*tar.Header {
			return []*tar.Header{
				{Typeflag: tar.TypeSymlink, Name: "victim", Linkname: outside + "/victim"},
				{Typeflag: tar.TypeReg, Name: "victim"},
			}
		}, false},
		{"hardlink through symlinked dir", func(outside string) []*tar.Header {
			return []*tar.Header{
				{Typeflag: tar.TypeSymlink, Name: "evil", Linkname: outside},
				{Typeflag: tar.TypeLink, Name: "pwned", Linkname: "evil/victim"},
			}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			outside := filepath.Join(parent, "outside")
			os.Mkdir(outside, 0o755)
			os.WriteFile(filepath.Join(outside, "victim"), []byte("victim"), 0o644)
			dest := filepath.Join(parent, "root")
			os.Mkdir(dest, 0o755)
			err := image.ApplyLayer(context.Background(), dest, strings.NewReader(string(rawTar(t, tt.hdrs(outside)...))))
			if tt.unsafe && !errors.Is(err, image.ErrUnsafePath) {
				t.Fatalf("ApplyLayer = %v, want ErrUnsafePath", err)
			}
			ents, _ := os.ReadDir(outside)
			if len(ents) != 1 || ents[0].Name() != "victim" {
				t.Fatalf("outside dir now holds %v", ents)
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "victim" {
				t.Fatalf("victim overwritten: %q", b)
			}
			if _, err := os.Lstat(filepath.Join(parent, "pwned")); err == nil {
				t.Fatal("pwned written beside the root")
			}
			victim, _ := os.Stat(filepath.Join(outside, "victim"))
			filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
				if fi, err := os.Lstat(p); err == nil && os.SameFile(fi, victim) {
					t.Errorf("%s is a hard link to a file outside the root", p)
				}
				return nil
			})
		})
	}
}

// TestRootfsRefusesHostileImage runs a traversal through Pull and Rootfs.
func TestRootfsRefusesHostileImage(t *testing.T) {
	ctx := context.Background()
	reg := imagetest.NewRegistry(t)
	l, err := imagebuild.RawLayer(rawTar(t, &tar.Header{Typeflag: tar.TypeReg, Name: "../../pwned"}))
	if err != nil {
		t.Fatal(err)
	}
	img, err := imagebuild.Image(v1.Config{}, l)
	if err != nil {
		t.Fatal(err)
	}
	reg.Push(t, "library/evil:1", img)
	s := newStore(t, t.TempDir(), reg.Addr)
	if _, err := s.Pull(ctx, "evil:1", ""); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	err = s.Rootfs(ctx, "evil:1", filepath.Join(parent, "a", "rootfs"))
	if !errors.Is(err, image.ErrRootfs) || !errors.Is(err, image.ErrUnsafePath) {
		t.Fatalf("Rootfs = %v, want ErrCreateContainer wrapping ErrUnsafePath", err)
	}
	if _, err := os.Stat(filepath.Join(parent, "pwned")); err == nil {
		t.Fatal("pwned written outside the rootfs")
	}
	if _, err := os.Stat(filepath.Join(parent, "a", ".rootfs.image")); err == nil {
		t.Fatal("a failed unpack left its marker")
	}
}

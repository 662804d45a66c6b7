package image_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podflow/podflow/nodeagent/linux/image"
	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
	"github.com/podflow/podflow/nodeagent/linux/image/imagetest"
)

// BenchmarkRootfs measures unpacking a pulled image into a fresh rootfs,
// the per-container cost on the pod start path: "busybox" is podflow's
// shell image (a 2 MB static binary and ~270 symlinks), "binary-6mib" is
// shaped like podflow/http:1 (one static binary).
func BenchmarkRootfs(b *testing.B) {
	ctx := context.Background()
	reg := imagetest.NewRegistry(b)
	imgs := map[string]func() (v1.Image, error){
		"binary-6mib": func() (v1.Image, error) {
			body := make([]byte, 6<<20)
			rand.Read(body)
			l, err := imagebuild.Layer([]imagebuild.Entry{imagebuild.Dir("bin", 0o755), imagebuild.File("bin/server", 0o755, body)})
			if err != nil {
				return nil, err
			}
			return imagebuild.Image(v1.Config{}, l)
		},
		"busybox": func() (v1.Image, error) {
			if _, err := os.Stat("/bin/busybox"); err != nil {
				return nil, fmt.Errorf("skip: needs /bin/busybox (Debian's busybox-static)")
			}
			return imagebuild.Busybox(ctx, "/bin/busybox")
		},
	}
	for _, name := range []string{"binary-6mib", "busybox"} {
		b.Run(name, func(b *testing.B) {
			img, err := imgs[name]()
			if err != nil {
				b.Skip(err)
			}
			reg.Push(b, "bench/"+name+":1", img)
			s, err := image.NewStore(image.Config{Dir: b.TempDir(), Mirror: reg.Addr, Parallelism: 4})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Pull(ctx, "bench/"+name+":1", ""); err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			b.ResetTimer()
			for i := range b.N {
				if err := s.Rootfs(ctx, "bench/"+name+":1", filepath.Join(dir, fmt.Sprint(i))); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			os.RemoveAll(dir)
		})
	}
}

// BenchmarkPullPresent measures Pull of a present image under
// IfNotPresent: the agent's cost per container start when the image is
// there.
func BenchmarkPullPresent(b *testing.B) {
	ctx := context.Background()
	reg := imagetest.NewRegistry(b)
	l, _ := imagebuild.Layer([]imagebuild.Entry{imagebuild.File("f", 0o644, []byte("x"))})
	img, _ := imagebuild.Image(v1.Config{}, l)
	reg.Push(b, "bench/present:1", img)
	s, err := image.NewStore(image.Config{Dir: b.TempDir(), Mirror: reg.Addr, Parallelism: 4})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Pull(ctx, "bench/present:1", ""); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := s.Pull(ctx, "bench/present:1", image.PullIfNotPresent); err != nil {
			b.Fatal(err)
		}
	}
}

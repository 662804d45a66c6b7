package imagebuild_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
)

func TestReproducible(t *testing.T) {
	build := func() v1.Hash {
		l, err := imagebuild.Layer([]imagebuild.Entry{imagebuild.Dir("bin", 0), imagebuild.File("bin/x", 0o755, []byte("x"))})
		if err != nil {
			t.Fatal(err)
		}
		img, err := imagebuild.Image(v1.Config{Cmd: []string{"/bin/x"}}, l)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if a, b := build(), build(); a != b {
		t.Fatalf("two builds of the same inputs: %s and %s", a, b)
	}
}

func TestWhiteoutNames(t *testing.T) {
	b, err := imagebuild.Tar([]imagebuild.Entry{imagebuild.Whiteout("etc/passwd"), imagebuild.Whiteout("top"), imagebuild.Opaque("var/lib/")})
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	want := []string{"etc/.wh.passwd", ".wh.top", "var/lib/.wh..wh..opq"}
	if len(names) != len(want) {
		t.Fatalf("names %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("names %q, want %q", names, want)
		}
	}
}

func TestPodflowImages(t *testing.T) {
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "httpserver")
	os.WriteFile(bin, []byte("#!fake"), 0o755)
	img, err := imagebuild.HTTPServer(bin)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	if cf.Config.Entrypoint[0] != "/usr/local/bin/httpserver" || cf.OS != "linux" {
		t.Fatalf("httpserver config %+v", cf)
	}
	if _, err := imagebuild.HTTPServer(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing binary built an image")
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("needs /bin/busybox (Debian's busybox-static) for the shell image")
	}
	bb, err := imagebuild.Busybox(ctx, "/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := bb.Layers()
	rc, _ := ls[0].Uncompressed()
	defer rc.Close()
	tr := tar.NewReader(rc)
	links := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeSymlink {
			links[h.Name] = h.Linkname
		}
	}
	for _, a := range []string{"bin/sh", "bin/ls", "bin/cat", "bin/sleep", "bin/wget"} {
		if links[a] != "busybox" {
			t.Errorf("%s -> %q, want busybox", a, links[a])
		}
	}
}

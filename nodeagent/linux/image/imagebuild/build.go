package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ErrBuild wraps every failure to assemble an image from its inputs.
var ErrBuild = errors.New("imagebuild: build failed")

// Epoch is the modification time of every entry and the creation time of
// every image, so builds are reproducible.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultPath is the PATH of podflow's images.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Entry is one entry of a layer.
type Entry struct {
	Name     string // path in the image, relative: "bin/sh"
	Type     byte   // tar.TypeReg (default for a zero value), TypeDir, TypeSymlink, TypeLink, TypeChar, ...
	Mode     int64  // permission bits; 0 means 0644 for files, 0755 for directories
	Body     []byte // content of a regular file
	Linkname string // target of a symlink or hardlink
	Uid, Gid int
}

// File is a regular file entry.
func File(name string, mode int64, body []byte) Entry {
	return Entry{Name: name, Type: tar.TypeReg, Mode: mode, Body: body}
}

// Dir is a directory entry.
func Dir(name string, mode int64) Entry { return Entry{Name: name, Type: tar.TypeDir, Mode: mode} }

// Symlink is a symbolic link entry.
func Symlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeSymlink, Mode: 0o777, Linkname: target}
}

// Hardlink is a hard link entry to target, an earlier entry.
func Hardlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeLink, Linkname: target}
}

// Whiteout deletes name (of the layers below) in an upper layer.
func Whiteout(name string) Entry {
	dir, base := splitPath(name)
	return File(dir+".wh."+base, 0o644, nil)
}

// Opaque hides everything the layers below hold in directory dir.
func Opaque(dir string) Entry {
	return File(strings.TrimSuffix(dir, "/")+"/.wh..wh..opq", 0o644, nil)
}

func splitPath(name string) (dir, base string) {
	i := strings.LastIndex(name, "/")
	return name[:i+1], name[i+1:]
}

// Tar returns the uncompressed tarball of entries, in the given order.
func Tar(entries []Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.Mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{
			Typeflag: typ, Name: e.Name, Mode: mode, Linkname: e.Linkname,
			Uid: e.Uid, Gid: e.Gid, ModTime: Epoch, Format: tar.FormatPAX,
		}
		if typ == tar.TypeDir && !strings.HasSuffix(hdr.Name, "/") {
			hdr.Name += "/"
		}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("%w: entry %q: %v", ErrBuild, e.Name, err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write(e.Body); err != nil {
				return nil, fmt.Errorf("%w: entry %q: %v", ErrBuild, e.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	return buf.Bytes(), nil
}

// Layer returns a gzip-compressed layer of entries.
func Layer(entries []Entry) (v1.Layer, error) {
	b, err := Tar(entries)
	if err != nil {
		return nil, err
	}
	return RawLayer(b)
}

// RawLayer returns a gzip-compressed layer of an uncompressed tarball,
// which may hold anything (tests use it for hostile layers).
func RawLayer(tb []byte) (v1.Layer, error) {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tb)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: layer: %v", ErrBuild, err)
	}
	return l, nil
}

// Image returns an image of layers (bottom first) with cfg as its config,
// for linux on the running architecture.
func Image(cfg v1.Config, layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: Epoch}
	cf.Config = cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	return img, nil
}

// base is what every podflow image holds besides its program: the
// directories a runtime mounts over and a minimal passwd and group.
func base() []Entry {
	return []Entry{
		Dir("bin", 0o755), Dir("dev", 0o755), Dir("etc", 0o755), Dir("proc", 0o555),
		Dir("sys", 0o555), Dir("tmp", 0o1777), Dir("root", 0o700), Dir("var", 0o755),
		Dir("usr", 0o755), Dir("usr/local", 0o755), Dir("usr/local/bin", 0o755),
		File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")),
		File("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")),
		File("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")),
	}
}

// HTTPServer returns podflow's HTTP server image: the static binary bin
// (built from images/httpserver) as /usr/local/bin/httpserver, the
// entrypoint; it listens on the ports of $PORTS, by default 8080 and 80.
func HTTPServer(bin string) (v1.Image, error) {
	body, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("%w: httpserver binary: %v", ErrBuild, err)
	}
	l, err := Layer(append(base(), File("usr/local/bin/httpserver", 0o755, body)))
	if err != nil {
		return nil, err
	}
	return Image(v1.Config{
		Entrypoint:   []string{"/usr/local/bin/httpserver"},
		Env:          []string{DefaultPath},
		ExposedPorts: map[string]struct{}{"80/tcp": {}, "8080/tcp": {}},
		WorkingDir:   "/",
	}, l)
}

// Busybox returns podflow's shell image: the static busybox binary bin as
// /bin/busybox with a symlink per applet it lists (`busybox --list`), and
// `sh` as its command.
func Busybox(ctx context.Context, bin string) (v1.Image, error) {
	body, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("%w: busybox binary: %v", ErrBuild, err)
	}
	out, err := exec.CommandContext(ctx, bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s --list: %v", ErrBuild, bin, err)
	}
	applets := strings.Fields(string(out))
	sort.Strings(applets)
	entries := append(base(), File("bin/busybox", 0o755, body))
	for _, a := range applets {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		entries = append(entries, Symlink("bin/"+a, "busybox"))
	}
	l, err := Layer(entries)
	if err != nil {
		return nil, err
	}
	return Image(v1.Config{Cmd: []string{"sh"}, Env: []string{DefaultPath}, WorkingDir: "/"}, l)
}

// Push writes each image to registry (host:port, plain HTTP on loopback)
// under its repository:tag ("podflow/http:1").
func Push(ctx context.Context, registry string, images map[string]v1.Image) error {
	refs := make([]string, 0, len(images))
	for r := range images {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	for _, r := range refs {
		ref, err := name.ParseReference(registry+"/"+r, name.Insecure)
		if err != nil {
			return fmt.Errorf("imagebuild: reference %q: %w", r, err)
		}
		if err := remote.Write(ref, images[r], remote.WithContext(ctx), remote.WithTransport(tr)); err != nil {
			return fmt.Errorf("imagebuild: push %q: %w", ref.String(), err)
		}
	}
	return nil
}

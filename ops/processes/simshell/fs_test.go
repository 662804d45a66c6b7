package simshell

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

func tarOf(t *testing.T, files map[string]string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

// TestTarRoundTrip: what `tar -xmf - -C DIR` extracts, `tar cf - PATH`
// gives back under the same names and `cat` prints; another container
// sees none of it, and a pruned pod's files are gone.
func TestTarRoundTrip(t *testing.T) {
	sh := &Shell{FS: NewFS(1 << 20)}
	c := &Container{Key: Key{"n1", "uid-1", "c"}, Namespace: "default", Pod: "p"}
	ctx := context.Background()
	var errb bytes.Buffer
	if code := sh.Exec(ctx, c, []string{"tar", "-xmf", "-", "-C", "/tmp"}, IO{Stdin: tarOf(t, map[string]string{"d/a.txt": "alpha", "b.bin": "\x00\x01beta"}), Stdout: io.Discard, Stderr: &errb}); code != 0 {
		t.Fatalf("extract: exit %d %s", code, errb.String())
	}
	if code := sh.Exec(ctx, c, []string{"test", "-d", "/tmp/d"}, IO{}); code != 0 {
		t.Errorf("test -d /tmp/d: exit %d", code)
	}
	if code := sh.Exec(ctx, c, []string{"test", "-d", "/tmp/b.bin"}, IO{}); code != 1 {
		t.Errorf("test -d on a file: exit %d", code)
	}
	var out bytes.Buffer
	if code := sh.Exec(ctx, c, []string{"cat", "/tmp/d/a.txt"}, IO{Stdout: &out}); code != 0 || out.String() != "alpha" {
		t.Errorf("cat: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := sh.Exec(ctx, c, []string{"tar", "cf", "-", "/tmp/d"}, IO{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("create: exit %d %s", code, errb.String())
	}
	tr := tar.NewReader(&out)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
	if len(got) != 2 || got["tmp/d/"] != "" || got["tmp/d/a.txt"] != "alpha" {
		t.Errorf("archive of /tmp/d: %q", got)
	}
	other := &Container{Key: Key{"n1", "uid-2", "c"}}
	if code := sh.Exec(ctx, other, []string{"tar", "cf", "-", "/tmp/b.bin"}, IO{Stdout: io.Discard, Stderr: io.Discard}); code != 2 {
		t.Errorf("another pod's container read the file: exit %d", code)
	}
	sh.FS.Prune("n1", map[string]bool{"uid-2": true})
	if code := sh.Exec(ctx, c, []string{"test", "-e", "/tmp/b.bin"}, IO{}); code != 1 || sh.FS.Used() != 0 {
		t.Errorf("after its pod went: test -e exit %d, %d bytes held", code, sh.FS.Used())
	}
}

// TestTarBound: an archive past the bound fails as a full disk, and holds
// nothing past it.
func TestTarBound(t *testing.T) {
	sh := &Shell{FS: NewFS(100)}
	c := &Container{Key: Key{"n1", "uid-1", "c"}}
	ctx := context.Background()
	var errb bytes.Buffer
	code := sh.Exec(ctx, c, []string{"tar", "-xmf", "-"}, IO{Stdin: tarOf(t, map[string]string{"big": strings.Repeat("x", 101)}), Stdout: io.Discard, Stderr: &errb})
	if code != 1 || !strings.Contains(errb.String(), "No space left on device") {
		t.Fatalf("101 bytes into 100: exit %d, %q", code, errb.String())
	}
	if sh.FS.Used() != 0 {
		t.Errorf("%d bytes held after a refused file", sh.FS.Used())
	}
	if code := sh.Exec(ctx, c, []string{"tar", "-xmf", "-", "-C", "/nope"}, IO{Stdin: tarOf(t, nil), Stdout: io.Discard, Stderr: io.Discard}); code != 2 {
		t.Errorf("-C a missing directory: exit %d", code)
	}
}

package roles

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/podflow/podflow/services/nodeexec"
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

func exitCode(err error) int {
	var ee *nodeexec.ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestSimTarRoundTrip: what `tar -xmf - -C DIR` extracts, `tar cf - PATH`
// gives back under the same names; another container sees none of it, and
// a pruned pod's files are gone.
func TestSimTarRoundTrip(t *testing.T) {
	fs := newSimFS(1 << 20)
	k := simFSKey{"n1", "uid-1", "c"}
	var errb bytes.Buffer
	if err := fs.simTar(k, []string{"-xmf", "-", "-C", "/tmp"}, tarOf(t, map[string]string{"d/a.txt": "alpha", "b.bin": "\x00\x01beta"}), io.Discard, &errb); err != nil {
		t.Fatalf("extract: %v %s", err, errb.String())
	}
	if c := exitCode(fs.simTest(k, []string{"-d", "/tmp/d"})); c != 0 {
		t.Errorf("test -d /tmp/d: exit %d", c)
	}
	if c := exitCode(fs.simTest(k, []string{"-d", "/tmp/b.bin"})); c != 1 {
		t.Errorf("test -d on a file: exit %d", c)
	}
	var out bytes.Buffer
	if err := fs.simTar(k, []string{"cf", "-", "/tmp/d"}, nil, &out, &errb); err != nil {
		t.Fatalf("create: %v %s", err, errb.String())
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
	other := simFSKey{"n1", "uid-2", "c"}
	if c := exitCode(fs.simTar(other, []string{"cf", "-", "/tmp/b.bin"}, nil, io.Discard, io.Discard)); c != 2 {
		t.Errorf("another pod's container read the file: exit %d", c)
	}
	fs.prune("n1", map[string]bool{"uid-2": true})
	if c := exitCode(fs.simTest(k, []string{"-e", "/tmp/b.bin"})); c != 1 || fs.used != 0 {
		t.Errorf("after its pod went: test -e exit %d, %d bytes held", c, fs.used)
	}
}

// TestSimTarBound: an archive past the bound fails as a full disk, and
// holds nothing past it.
func TestSimTarBound(t *testing.T) {
	fs := newSimFS(100)
	k := simFSKey{"n1", "uid-1", "c"}
	var errb bytes.Buffer
	err := fs.simTar(k, []string{"-xmf", "-"}, tarOf(t, map[string]string{"big": strings.Repeat("x", 101)}), io.Discard, &errb)
	if c := exitCode(err); c != 1 || !strings.Contains(errb.String(), "No space left on device") {
		t.Fatalf("101 bytes into 100: exit %d, %q", c, errb.String())
	}
	if fs.used != 0 {
		t.Errorf("%d bytes held after a refused file", fs.used)
	}
	if c := exitCode(fs.simTar(k, []string{"-xmf", "-", "-C", "/nope"}, tarOf(t, nil), io.Discard, io.Discard)); c != 2 {
		t.Errorf("-C a missing directory: exit %d", c)
	}
}

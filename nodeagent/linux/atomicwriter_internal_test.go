package linux

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

func readLinkT(t *testing.T, p string) string {
	t.Helper()
	s, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// kubelet's layout: ..data links to a timestamped directory holding the
// files with their modes, each top-level name links through ..data; an
// update swaps ..data to a new directory, drops names no longer in the
// payload and removes the old directory; an unchanged payload writes
// nothing.
func TestAtomicWriterLayout(t *testing.T) {
	dir := t.TempDir()
	if err := writeAtomic(dir, map[string]projection{
		"labels":   {data: []byte("app=\"web\""), mode: 0o644},
		"conf/cpu": {data: []byte("2"), mode: 0o400},
		"name":     {data: []byte("web"), mode: 0o600},
	}); err != nil {
		t.Fatal(err)
	}
	ts := readLinkT(t, filepath.Join(dir, "..data"))
	if !strings.HasPrefix(ts, "..20") || strings.Contains(ts, "/") {
		t.Fatalf("..data -> %q, want a timestamped sibling directory", ts)
	}
	for name, target := range map[string]string{"labels": "..data/labels", "conf": "..data/conf", "name": "..data/name"} {
		if got := readLinkT(t, filepath.Join(dir, name)); got != target {
			t.Errorf("%s -> %q, want %q", name, got, target)
		}
	}
	for p, mode := range map[string]os.FileMode{"labels": 0o644, "conf/cpu": 0o400, "name": 0o600} {
		st, err := os.Stat(filepath.Join(dir, p)) // through the links
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s mode %o, want %o", p, st.Mode().Perm(), mode)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "labels")); string(b) != "app=\"web\"" {
		t.Errorf("labels = %q", b)
	}

	// Unchanged: no new directory.
	if err := writeAtomic(dir, map[string]projection{
		"labels":   {data: []byte("app=\"web\""), mode: 0o644},
		"conf/cpu": {data: []byte("2"), mode: 0o400},
		"name":     {data: []byte("web"), mode: 0o600},
	}); err != nil {
		t.Fatal(err)
	}
	if got := readLinkT(t, filepath.Join(dir, "..data")); got != ts {
		t.Errorf("an unchanged payload moved ..data from %q to %q", ts, got)
	}

	// Changed: labels updated, conf gone, name kept.
	if err := writeAtomic(dir, map[string]projection{
		"labels": {data: []byte("app=\"web\"\ntier=\"front\""), mode: 0o644},
		"name":   {data: []byte("web"), mode: 0o600},
	}); err != nil {
		t.Fatal(err)
	}
	ts2 := readLinkT(t, filepath.Join(dir, "..data"))
	if ts2 == ts {
		t.Fatal("a changed payload kept the old directory")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "labels")); string(b) != "app=\"web\"\ntier=\"front\"" {
		t.Errorf("labels after the update = %q", b)
	}
	want := []string{"..data", ts2, "labels", "name"}
	slices.Sort(want)
	if got := entries(t, dir); !slices.Equal(got, want) {
		t.Errorf("volume holds %v, want %v (old directory, obsolete link and ..data_tmp gone)", got, want)
	}
}

// The writer refuses paths out of the volume, whatever its caller checked.
func TestAtomicWriterRefusesEscapes(t *testing.T) {
	for _, p := range []string{"/etc/passwd", "../x", "a/../../x", "..data", ".", ""} {
		dir := t.TempDir()
		if err := writeAtomic(dir, map[string]projection{p: {data: []byte("x"), mode: 0o644}}); err == nil {
			t.Errorf("path %q: written, want refused", p)
		}
		if got := entries(t, dir); len(got) != 0 {
			t.Errorf("path %q: volume holds %v after a refusal", p, got)
		}
	}
}

// A file's mode is its item's, else the volume's defaultMode, else 0644.
func TestDownwardAPIPayloadModes(t *testing.T) {
	m := func(v int32) *int32 { return &v }
	src := &corev1.DownwardAPIVolumeSource{DefaultMode: m(0o440), Items: []*corev1.DownwardAPIVolumeFile{
		{Path: "a", Mode: m(0o600)}, {Path: "./b"},
	}}
	got := downwardAPIPayload(src, map[string][]byte{"a": nil, "b": nil})
	if got["a"].mode != 0o600 || got["b"].mode != 0o440 {
		t.Errorf("modes a=%o b=%o, want 600 and 440", got["a"].mode, got["b"].mode)
	}
	src.DefaultMode = nil
	if got := downwardAPIPayload(src, map[string][]byte{"b": nil}); got["b"].mode != 0o644 {
		t.Errorf("mode without defaultMode %o, want 644", got["b"].mode)
	}
}

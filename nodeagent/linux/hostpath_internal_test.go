package linux

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestHostPathReadOnlyPrefixes: an allowlist entry ending in ":ro" lets a
// hostPath volume name it (a file, or what lies below a directory) but
// makes the volume read-only and creates nothing under it; a read-write
// entry covering the same path wins; what no entry covers is refused, as
// is a ":ro" entry of / in the configuration.
func TestHostPathReadOnlyPrefixes(t *testing.T) {
	dir := t.TempDir()
	rw, roDir := filepath.Join(dir, "rw"), filepath.Join(dir, "ro")
	for _, d := range []string{rw, roDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "hosts")
	if err := os.WriteFile(file, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{cfg: Config{HostPathPrefixes: []string{rw, roDir + HostPathReadOnlySuffix, file + HostPathReadOnlySuffix}}}
	for _, tc := range []struct {
		path, typ string
		wantRO    bool
		wantErr   error
	}{
		{rw, "", false, nil},
		{filepath.Join(rw, "new"), "DirectoryOrCreate", false, nil},
		{file, "FileOrCreate", true, nil},
		{roDir, "", true, nil},
		{filepath.Join(roDir, "new"), "DirectoryOrCreate", false, os.ErrNotExist}, // not created
		{filepath.Join(dir, "other"), "DirectoryOrCreate", false, os.ErrNotExist},
		{dir, "", false, ErrHostPathNotAllowed},
	} {
		_, ro, err := r.hostPath(&corev1.HostPathVolumeSource{Path: tc.path, Type: tc.typ})
		if !errors.Is(err, tc.wantErr) || (err == nil && ro != tc.wantRO) {
			t.Errorf("hostPath %s (%s): read-only %v, %v; want %v, %v", tc.path, tc.typ, ro, err, tc.wantRO, tc.wantErr)
		}
	}
	// The same directory allowed read-write too: read-write.
	r.cfg.HostPathPrefixes = append(r.cfg.HostPathPrefixes, roDir)
	if _, ro, err := r.hostPath(&corev1.HostPathVolumeSource{Path: roDir}); err != nil || ro {
		t.Errorf("hostPath %s allowed read-write and read-only: read-only %v, %v; want read-write", roDir, ro, err)
	}
	for entry, ok := range map[string]bool{"/etc/hosts:ro": true, "/tmp/job-e2e": true, "/:ro": false, "etc/hosts:ro": false, "/": false} {
		cfg := DefaultConfig("n", "10.244.1.0/24", dir, "127.0.0.1:5000")
		cfg.HostPathPrefixes = []string{entry}
		if err := cfg.Validate(); (err == nil) != ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
			t.Errorf("HostPathPrefixes %q: %v, want valid %v", entry, err, ok)
		}
	}
}

package container_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/podflow/podflow/nodeagent/linux/container"
)

// MkdirInRoot creates inside the root only, whatever the symlinks in it.
func TestMkdirInRoot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		link   string // target of root/l ("" = none)
		path   string
		ok     bool
		inside string // what must exist under root afterwards
	}{
		{"plain", "", "a/b/c", true, "a/b/c"},
		{"existing", "", ".", true, "."},
		{"through a link inside", "a", "l/x", true, "a/x"},
		{"absolute link resolves in root", "/a", "l/y", true, "a/y"},
		{"absolute link to a missing dir", "/outside", "l/z", false, ""},
		{"up link", "../../../../outside", "l/z", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			if err := os.Mkdir(filepath.Join(root, "a"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.link != "" {
				target := tc.link
				if target == "/outside" || target == "../../../../outside" {
					target = filepath.Join(filepath.Dir(target), filepath.Base(outside))
					if tc.link == "/outside" {
						target = outside // absolute: the host's outside dir
					}
				}
				if err := os.Symlink(target, filepath.Join(root, "l")); err != nil {
					t.Fatal(err)
				}
			}
			err := container.MkdirInRoot(root, tc.path)
			if (err == nil) != tc.ok {
				t.Fatalf("MkdirInRoot(%q) = %v, want ok %v", tc.path, err, tc.ok)
			}
			if tc.inside != "" {
				if fi, err := os.Stat(filepath.Join(root, tc.inside)); err != nil || !fi.IsDir() {
					t.Errorf("%s not made inside the root: %v", tc.inside, err)
				}
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("made %v outside the root", ents)
			}
		})
	}
}

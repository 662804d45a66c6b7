package container

import (
	"errors"
	"os"
	"testing"
)

// TestRemoveDeviceCgroup: the device cgroup a killed shim left behind is
// removed; one already gone is no error.
func TestRemoveDeviceCgroup(t *testing.T) {
	root := devicesRootV1
	t.Cleanup(func() { devicesRootV1 = root })
	devicesRootV1 = t.TempDir()
	dir := deviceCgroupDirV1(Spec{ID: "abc"})
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := RemoveDeviceCgroup("abc"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s still there: %v", dir, err)
	}
	if err := RemoveDeviceCgroup("abc"); err != nil {
		t.Fatalf("a second removal: %v", err)
	}
}

package image

import (
	"bytes"
	"context"
	"io"

	"github.com/podflow/podflow/nodeagent"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// Rootfs unpacks the layers of ref (a reference or an image ID, already
// pulled) in order into dest, applying whiteouts (".wh.<name>" deletes
// <name> of the layers below; ".wh..wh..opq" hides everything below in its
// directory), hardlinks and symlinks. Entries are resolved as if dest were
// the root (openat2 RESOLVE_IN_ROOT): a symlink never leads a write out of
// dest, and an entry or hardlink whose name climbs out of dest ("../x")
// fails the unpack with ErrUnsafePath. Device nodes are created only when
// running as root, and ownership is applied only then.
//
// Rootfs is idempotent: on success it writes a marker beside dest
// ("<parent>/.<base>.image") holding the image ID, and a later call for the
// same image returns at once; otherwise dest is removed and unpacked
// afresh. Failures are nodeagent.ErrCreateContainer.
func (s *Store) Rootfs(ctx context.Context, ref, dest string) error {
	return nodeagent.Errorf(nodeagent.CodeCreateContainer, "rootfs of %q: not implemented yet", ref)
}

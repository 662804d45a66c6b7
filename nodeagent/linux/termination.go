package linux

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/container"
	"golang.org/x/sys/unix"
)

// terminationLog is the file, in a container instance's directory, that
// is mounted at its terminationMessagePath.
const terminationLog = "termination-log"

var _ nodeagent.TerminationMessageReader = (*Runtime)(nil)

// terminationMount makes the file a container instance writes its
// termination message to, as kubelet does: a fresh empty file in the
// instance's directory dir, mode 0666 so that any user of the container
// can write it, bind-mounted over path (last, over the volumes). The
// init resolves path in the rootfs as every mount destination (a symlink
// in the image leads nowhere outside it), and the runtime reads the
// message from its own file, never through the container's tree.
func terminationMount(dir, path string) (container.Mount, error) {
	src := filepath.Join(dir, terminationLog)
	f, err := os.OpenFile(src, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o666)
	if err != nil {
		return container.Mount{}, nodeagent.Errorf(nodeagent.CodeCreateContainer, "termination message file: %w", err)
	}
	err = f.Chmod(0o666) // whatever the umask
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return container.Mount{}, nodeagent.Errorf(nodeagent.CodeCreateContainer, "termination message file: %w", err)
	}
	return container.Mount{Source: src, Destination: path}, nil
}

// instance returns the pod and directory of container instance id.
func (r *Runtime) instance(podUID string, id nodeagent.ContainerID) (*pod, *ctr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pods[podUID]
	if p == nil {
		return nil, nil
	}
	return p, p.ctrs[id]
}

// TerminationMessage implements nodeagent.TerminationMessageReader: the
// last max bytes of the instance's termination message file (see
// terminationMount); none for an instance without one (started before
// podflow had them, or gone).
func (r *Runtime) TerminationMessage(ctx context.Context, podUID string, id nodeagent.ContainerID, max int) ([]byte, bool, error) {
	p, c := r.instance(podUID, id)
	if c == nil {
		return nil, false, ctx.Err()
	}
	f, err := os.OpenFile(filepath.Join(ctrDir(p, c.meta.ID), terminationLog), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, ctx.Err()
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	b, err := tailFile(f, max)
	return b, err == nil, err
}

// tailFile reads the last max bytes of the regular file f.
func tailFile(f *os.File, limit int) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", f.Name())
	}
	off := max(fi.Size()-int64(limit), 0)
	b := make([]byte, fi.Size()-off)
	n, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:n], nil
}

// LogTail implements nodeagent.TerminationMessageReader: the text of the
// last lines lines of the instance's current log file (CRI records joined
// back into lines, as kubectl logs shows them), at most its last max
// bytes.
func (r *Runtime) LogTail(ctx context.Context, podUID string, id nodeagent.ContainerID, lines, max int) ([]byte, error) {
	p, c := r.instance(podUID, id)
	if c == nil {
		return nil, ctx.Err()
	}
	f, err := os.OpenFile(logPath(p, c.meta.Name, c.meta.RestartCount), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	off, err := container.LogStart(f, int64(lines), time.Time{})
	if err != nil || off < 0 {
		return nil, err
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	var out []byte
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if rec, ok := container.ParseLogRecord(line[:len(line)-1]); ok {
				out = append(out, rec.Text...)
				if !rec.Partial {
					out = append(out, '\n')
				}
				if len(out) > 2*max { // keep only what can be the tail
					out = append(out[:0], out[len(out)-max:]...)
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, err
			}
			break
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out[len(out)-min(len(out), max):], nil
}

package linux

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/container"
)

// ErrNoLogs is matched (errors.Is) by ReadLog's error when the pod or
// container instance is unknown on this node; the error is a
// nodeagent.Error with CodeNotFound and kubelet's words.
var ErrNoLogs = errors.New("linux: no such pod or container on this node")

// LogRequest asks for a container's log (nodeagent.LogRequest).
type LogRequest = nodeagent.LogRequest

// LogChunk is a piece of a container's log (nodeagent.LogChunk).
type LogChunk = nodeagent.LogChunk

var _ nodeagent.LogReader = (*Runtime)(nil)

func noLogs(format string, args ...any) error {
	return &nodeagent.Error{Code: nodeagent.CodeNotFound, Msg: fmt.Sprintf(format, args...), Err: ErrNoLogs}
}

// ReadLog implements nodeagent.LogReader: at most max bytes of a
// container instance's log (whole CRI lines) from req.Offset. The pod is
// req.UID's, else the newest of that name; the instance is req.ID, else
// the newest of req.Container (with req.Previous, the one before it; no
// name: the newest app container's). The logs of a released pod's
// containers are read until its removal begins.
func (r *Runtime) ReadLog(req LogRequest, max int) (LogChunk, error) {
	r.mu.Lock()
	var p *pod
	for _, q := range r.pods {
		if q.removing || q.rec.Namespace != req.Namespace || q.rec.Name != req.Pod || (req.UID != "" && q.rec.UID != req.UID) {
			continue
		}
		if p == nil || q.rec.CreatedAt.After(p.rec.CreatedAt) {
			p = q
		}
	}
	if p == nil {
		r.mu.Unlock()
		return LogChunk{}, noLogs("pod %q does not exist", req.Pod)
	}
	var inst []*ctr
	for _, c := range p.ctrs {
		if (req.ID != "" && c.meta.ID == string(req.ID)) || (req.ID == "" && (req.Container == "" || c.meta.Name == req.Container)) {
			inst = append(inst, c)
		}
	}
	r.mu.Unlock()
	sort.Slice(inst, func(i, j int) bool { return inst[i].meta.CreatedAt.After(inst[j].meta.CreatedAt) })
	if req.Container == "" && req.ID == "" && len(inst) > 0 {
		name := inst[0].meta.Name
		for _, c := range inst { // prefer app containers, the newest first
			if !c.meta.Init {
				name = c.meta.Name
				break
			}
		}
		inst = filter(inst, name)
	}
	i := 0
	if req.Previous && req.ID == "" {
		i = 1
	}
	if i >= len(inst) {
		return LogChunk{}, noLogs("container %q not found in pod %q", req.Container, req.Pod)
	}
	c := inst[i]
	out := LogChunk{Container: c.meta.Name, Offset: req.Offset}
	select {
	case <-c.c.Done():
	default:
		out.Running = true
	}
	f, err := os.Open(logPath(p, c.meta.Name, c.meta.RestartCount))
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return out, err
	}
	out.File = fileID(fi)
	off, err := startOffset(f, fi, req, out.File)
	if err != nil {
		return out, err
	}
	buf := make([]byte, max)
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return out, err
	}
	buf = buf[:n]
	if k := lastNewline(buf); k >= 0 {
		buf = buf[:k+1]
	} else {
		buf = buf[:0]
	}
	out.Data, out.Offset = buf, off+int64(len(buf))
	return out, nil
}

// startOffset is where a read of the log file f (identified by id) starts.
func startOffset(f *os.File, fi os.FileInfo, req LogRequest, id string) (int64, error) {
	switch {
	case req.File != "" && req.File != id:
		return 0, nil // rotated: the new file from its start
	case req.File != "" || (req.TailLines == nil && req.SinceTime == 0):
		return req.Offset, nil
	}
	tail, since := int64(-1), time.Time{}
	if req.TailLines != nil {
		tail = *req.TailLines
	}
	if req.SinceTime != 0 {
		since = time.Unix(0, req.SinceTime)
	}
	off, err := container.LogStart(io.NewSectionReader(f, 0, fi.Size()), tail, since)
	if off < 0 {
		off = fi.Size() // nothing yet: what comes next
	}
	return off, err
}

// fileID tells a log file from the one that replaces it at rotation.
func fileID(fi os.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return strconv.FormatUint(st.Dev, 10) + ":" + strconv.FormatUint(st.Ino, 10)
	}
	return fi.ModTime().String()
}

func filter(cs []*ctr, name string) []*ctr {
	var out []*ctr
	for _, c := range cs {
		if c.meta.Name == name {
			out = append(out, c)
		}
	}
	return out
}

func lastNewline(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return i
		}
	}
	return -1
}

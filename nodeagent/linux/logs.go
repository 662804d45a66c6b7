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

	"github.com/podflow/podflow/nodeagent/linux/container"
)

// ErrNoLogs is returned by ReadLog when the pod or container is unknown
// on this node.
var ErrNoLogs = errors.New("linux: no such pod or container on this node")

// LogRequest asks for a container's log from Offset on.
type LogRequest struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container,omitempty"` // "" = the pod's only (or first) container
	Previous  bool   `json:"previous,omitempty"`  // the instance before the current one
	Offset    int64  `json:"offset,omitempty"`    // byte offset in the CRI log file
	// File identifies the file Offset is in (LogChunk.File of the last
	// read); "" on the first read, which starts at the last TailLines
	// lines (nil: all) written at or after SinceTime (Unix ns; 0: any).
	// When the log was rotated since, reading goes on at the start of the
	// current file, as kubelet's follow does.
	File      string `json:"file,omitempty"`
	TailLines *int64 `json:"tailLines,omitempty"`
	SinceTime int64  `json:"sinceTime,omitempty"`
}

// LogChunk is a piece of a CRI-format log (whole lines only) and where the
// next read starts. Running says whether the instance still runs (a
// follower stops once it does not and no data is left).
type LogChunk struct {
	Container string `json:"container"`
	Data      []byte `json:"data"`
	Offset    int64  `json:"offset"`
	File      string `json:"file,omitempty"`
	Running   bool   `json:"running"`
}

// ReadLog reads at most max bytes of a container's log (whole CRI lines)
// starting at req.Offset.
func (r *Runtime) ReadLog(req LogRequest, max int) (LogChunk, error) {
	r.mu.Lock()
	var p *pod
	for _, q := range r.pods {
		if q.rec.Namespace == req.Namespace && q.rec.Name == req.Pod {
			p = q
		}
	}
	if p == nil {
		r.mu.Unlock()
		return LogChunk{}, fmt.Errorf("pod %s/%s: %w", req.Namespace, req.Pod, ErrNoLogs)
	}
	var inst []*ctr
	for _, c := range p.ctrs {
		if req.Container == "" || c.meta.Name == req.Container {
			inst = append(inst, c)
		}
	}
	r.mu.Unlock()
	sort.Slice(inst, func(i, j int) bool { return inst[i].meta.CreatedAt.After(inst[j].meta.CreatedAt) })
	if req.Container == "" && len(inst) > 0 {
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
	if req.Previous {
		i = 1
	}
	if i >= len(inst) {
		return LogChunk{}, fmt.Errorf("container %q of pod %s/%s: %w", req.Container, req.Namespace, req.Pod, ErrNoLogs)
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

package sim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Container logs. Every container instance has a log in CRI format
// ("<RFC3339Nano time> <stdout|stderr> <F|P> <message>", the format
// kubelet reads), bounded by Config.LogMaxBytes (the oldest lines go
// first). What is in it:
//
//   - a container whose program the runtime runs (Config.Programs): what
//     that program wrote, nothing else;
//   - any other container: synthetic lines, each starting with
//     SyntheticPrefix: that it started, with its image, command and args;
//     what the pod's sim.podflow.io/log annotation says it logged; each
//     probe's first result and every change of it; and how it ended (the
//     code, the signal, the annotation that made it).
//
// A restarted container's previous instance keeps its log (kubectl logs
// --previous) until the next restart, as kubelet keeps one dead
// container per name.

// SyntheticPrefix starts every line the runtime writes on behalf of a
// container that runs no program.
const SyntheticPrefix = "podflow-sim: "

// DefaultLogMaxBytes bounds one container instance's log.
const DefaultLogMaxBytes = 256 << 10

// criTime is the time format of a CRI log line (kubelet's RFC3339Nano).
const criTime = time.RFC3339Nano

// logBuf is one instance's log: whole CRI lines from offset base on.
// Guarded by the runtime's mutex.
type logBuf struct {
	data []byte
	base int64 // offset of data[0] since the instance started
	max  int
	// grown is closed at every write (followers wait on it): made by
	// grownCh when a follower waits, nil after each write, so a log no one
	// follows (nearly all) holds none and a write makes none (~100 bytes a
	// container).
	grown chan struct{}
}

func newLogBuf(max int) *logBuf {
	if max <= 0 {
		max = DefaultLogMaxBytes
	}
	return &logBuf{max: max}
}

// grownCh returns a channel closed at the log's next write or wake.
func (l *logBuf) grownCh() <-chan struct{} {
	if l.grown == nil {
		l.grown = make(chan struct{})
	}
	return l.grown
}

// write appends data written to stream at t as CRI records: one F record
// per complete line, a P record for a trailing partial line.
func (l *logBuf) write(t time.Time, stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	ts := t.UTC().Format(criTime)
	for len(data) > 0 {
		line, rest, full := bytes.Cut(data, []byte{'\n'})
		tag := "P"
		if full {
			tag = "F"
		}
		l.data = append(l.data, ts...)
		l.data = append(l.data, ' ')
		l.data = append(l.data, stream...)
		l.data = append(l.data, ' ')
		l.data = append(l.data, tag...)
		l.data = append(l.data, ' ')
		l.data = append(l.data, line...)
		l.data = append(l.data, '\n')
		data = rest
	}
	if over := len(l.data) - l.max; over > 0 {
		// Drop whole lines from the front, as a rotated log loses its
		// oldest file.
		cut := over
		if i := bytes.IndexByte(l.data[cut:], '\n'); i >= 0 {
			cut += i + 1
		} else {
			cut = len(l.data)
		}
		l.base += int64(cut)
		l.data = append([]byte(nil), l.data[cut:]...)
	}
	l.wake()
}

// wake wakes the log's followers.
func (l *logBuf) wake() {
	if l.grown != nil {
		close(l.grown)
		l.grown = nil
	}
}

// end is the offset after the last byte written.
func (l *logBuf) end() int64 { return l.base + int64(len(l.data)) }

// read returns at most max bytes of whole lines from off (the first line
// kept when off is before it), and the offset after them.
func (l *logBuf) read(off int64, max int) ([]byte, int64) {
	if off < l.base {
		off = l.base
	}
	if off >= l.end() {
		return nil, l.end()
	}
	b := l.data[off-l.base:]
	if len(b) > max {
		i := bytes.LastIndexByte(b[:max], '\n')
		if i < 0 { // one line longer than max: hand it whole
			i = bytes.IndexByte(b, '\n')
		}
		b = b[:i+1]
	}
	return append([]byte(nil), b...), off + int64(len(b))
}

// startOf is where a first read begins: at the last tail lines (nil: all)
// of those written at or after since (zero: any).
func (l *logBuf) startOf(tail *int64, since time.Time) int64 {
	off := l.base
	lines := bytes.SplitAfter(l.data, []byte{'\n'})
	if !since.IsZero() {
		for _, ln := range lines {
			ts, _, _ := bytes.Cut(ln, []byte{' '})
			if t, err := time.Parse(criTime, string(ts)); err == nil && !t.Before(since) {
				break
			}
			off += int64(len(ln))
		}
	}
	if tail != nil {
		n := 0
		end := l.end()
		for i := len(lines) - 1; i >= 0 && n < int(*tail); i-- {
			if len(lines[i]) == 0 {
				continue
			}
			end -= int64(len(lines[i]))
			n++
		}
		off = max(off, end)
	}
	return off
}

var _ nodeagent.LogReader = (*Runtime)(nil)

// ReadLog implements nodeagent.LogReader (kubectl logs): the instance
// req.ID names (the agent picks it from the pod's status, as kubelet
// does), else by name the running instance or the last one that ran, and
// with Previous the one before it. A finished pod's logs stay readable
// after its sandbox is removed (keepGoneLocked).
func (r *Runtime) ReadLog(req nodeagent.LogRequest, max int) (nodeagent.LogChunk, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pods[req.UID]
	if p == nil {
		for _, x := range r.pods {
			md := x.pod.GetMetadata()
			if md.GetNamespace() == req.Namespace && md.GetName() == req.Pod && (req.UID == "" || md.GetUid() == req.UID) && (p == nil || x.created.After(p.created)) {
				p = x
			}
		}
	}
	if p == nil {
		if g := r.gone[req.Namespace+"/"+req.Pod]; g != nil && (req.UID == "" || g.pod.GetMetadata().GetUid() == req.UID) {
			p = g
		}
	}
	if p == nil {
		return nodeagent.LogChunk{}, nodeagent.Errorf(nodeagent.CodeNotFound, "pod %q in namespace %q is not on this node", req.Pod, req.Namespace)
	}
	name := req.Container
	if name == "" {
		cs := p.pod.GetSpec().GetContainers()
		if len(cs) != 1 {
			var names []string
			for _, c := range cs {
				names = append(names, c.GetName())
			}
			return nodeagent.LogChunk{}, nodeagent.Errorf(nodeagent.CodeBadRequest, "a container name must be specified for pod %s, choose one of: %v", req.Pod, names)
		}
		name = cs[0].GetName()
	}
	var l *logBuf
	running := false
	file := string(req.ID)
	switch c := p.container(req.ID); {
	case req.ID != "" && c != nil:
		l, running = c.log, c.info.Running
	case req.ID != "" && p.prevLogs[name] != nil && p.prevLogs[name].id == req.ID:
		l = p.prevLogs[name].log
	case req.ID != "":
		return nodeagent.LogChunk{}, nodeagent.Errorf(nodeagent.CodeNotFound, "container %q of pod %q: no instance %s on this node", name, req.Pod, req.ID)
	case req.Previous:
		prev := p.prevLogs[name]
		if prev == nil {
			return nodeagent.LogChunk{}, nodeagent.Errorf(nodeagent.CodeBadRequest, "previous terminated container %q in pod %q not found", name, req.Pod)
		}
		l, file = prev.log, string(prev.id)
	default:
		var cur *simCtr
		for _, c := range p.containers {
			if c.info.Name == name && (cur == nil || c.info.StartedAt.After(cur.info.StartedAt)) {
				cur = c
			}
		}
		if cur == nil {
			return nodeagent.LogChunk{}, nodeagent.Errorf(nodeagent.CodeBadRequest, "container %q in pod %q is waiting to start - no logs yet", name, req.Pod)
		}
		l, file, running = cur.log, string(cur.info.ID), cur.info.Running
	}
	off := req.Offset
	if req.File == "" || req.File != file { // a first read, or the instance changed
		var since time.Time
		if req.SinceTime != 0 {
			since = time.Unix(0, req.SinceTime)
		}
		off = l.startOf(req.TailLines, since)
	}
	data, next := l.read(off, max)
	return nodeagent.LogChunk{Container: name, Data: data, Offset: next, File: file, Running: running}, nil
}

// prevLog is the log of a container's previous instance.
type prevLog struct {
	id  nodeagent.ContainerID
	log *logBuf
}

// synthetic writes a line on behalf of a container that runs no program.
func (r *Runtime) syntheticLocked(c *simCtr, format string, a ...any) {
	if c.program {
		return
	}
	c.log.write(r.clock.Now(), "stdout", []byte(SyntheticPrefix+fmt.Sprintf(format, a...)+"\n"))
}

// startLines are the first lines of a container that runs no program:
// what it is, then what the log annotation says it logged.
func (r *Runtime) startLinesLocked(pod *corev1.Pod, c *simCtr, spec *corev1.Container) {
	cmd := "the image's entrypoint"
	if len(spec.GetCommand()) > 0 {
		cmd = strconv.Quote(strings.Join(spec.GetCommand(), " "))
	}
	if len(spec.GetArgs()) > 0 {
		cmd += " with args " + strconv.Quote(strings.Join(spec.GetArgs(), " "))
	}
	r.syntheticLocked(c, "container %q started from image %q running %s (simulated: no process runs; lines starting %q are the runtime's)",
		spec.GetName(), spec.GetImage(), cmd, strings.TrimSpace(SyntheticPrefix))
	if s, ok := pod.GetMetadata().GetAnnotations()[AnnotationLog]; ok && !c.program {
		c.log.write(r.clock.Now(), "stdout", []byte(strings.TrimSuffix(s, "\n")+"\n"))
	}
}

// exitLine says how a container that runs no program ended.
func exitLine(ex nodeagent.ContainerExit, why string) string {
	switch {
	case ex.Signal == 15:
		return fmt.Sprintf("received SIGTERM: exited with code %d", ex.ExitCode)
	case ex.Signal == 9:
		return fmt.Sprintf("killed by SIGKILL: exited with code %d%s", ex.ExitCode, why)
	}
	return fmt.Sprintf("exited with code %d%s", ex.ExitCode, why)
}

// LogWriter returns a writer that appends to the log of running instance
// id as stream ("stdout" or "stderr"), and whether there is one.
func (r *Runtime) logWriter(c *simCtr, stream string) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		r.mu.Lock()
		c.log.write(r.clock.Now(), stream, b)
		r.mu.Unlock()
		return len(b), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// followLog writes what instance c logs from offset off on to out and errOut
// (CRI records turned into text; everything to out with tty) until it
// exits (nil) or ctx ends (ctx's error).
func (r *Runtime) followLog(ctx context.Context, c *simCtr, off int64, out, errOut io.Writer, tty bool) error {
	for {
		r.mu.Lock()
		data, next := c.log.read(off, 64<<10)
		grown, running := c.log.grownCh(), c.info.Running
		r.mu.Unlock()
		off = next
		if len(data) > 0 {
			if err := writeRecords(data, out, errOut, tty); err != nil {
				return err
			}
			continue
		}
		if !running {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-grown:
		case <-r.done:
			return nil
		}
	}
}

// writeRecords writes CRI records' messages to out (stdout) or errOut
// (stderr; out with tty), a newline after each complete line.
func writeRecords(cri []byte, out, errOut io.Writer, tty bool) error {
	for _, line := range bytes.Split(cri, []byte{'\n'}) {
		f := bytes.SplitN(line, []byte{' '}, 4)
		if len(f) < 4 {
			continue
		}
		w := out
		if string(f[1]) == "stderr" && !tty && errOut != nil {
			w = errOut
		}
		if w == nil {
			continue
		}
		msg := f[3]
		if string(f[2]) != "P" {
			msg = append(msg, '\n')
		}
		if _, err := w.Write(msg); err != nil {
			return err
		}
	}
	return nil
}

// keepGoneLocked keeps the logs of removed pod p readable until maxGone
// pods were removed after it, or a pod of its name runs again.
func (r *Runtime) keepGoneLocked(p *simPod) {
	key := p.pod.GetMetadata().GetNamespace() + "/" + p.pod.GetMetadata().GetName()
	if r.gone == nil {
		r.gone = map[string]*simPod{}
	}
	if _, ok := r.gone[key]; !ok {
		r.goneOrder = append(r.goneOrder, key)
	}
	r.gone[key] = p
	for len(r.goneOrder) > maxGone {
		delete(r.gone, r.goneOrder[0])
		r.goneOrder = r.goneOrder[1:]
	}
}

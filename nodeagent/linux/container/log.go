package container

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// maxLogLine is the longest line written as one record; longer lines are
// split into partial ("P") records, as the CRI log format does.
const maxLogLine = 16 << 10

// Log rotation defaults: kubelet's containerLogMaxSize and
// containerLogMaxFiles.
const (
	DefaultLogMaxSize  = 10 << 20
	DefaultLogMaxFiles = 5
	// MinLogMaxSize is the smallest rotation size: a few of the longest
	// records (maxLogLine) fit in one file.
	MinLogMaxSize = 64 << 10
)

// logWriter appends CRI-format records ("<RFC3339Nano> <stream> <F|P>
// <text>\n") for several streams to one file. With maxSize set, a record
// that would take the file past it first rotates the file, as kubelet's
// container log manager does: the file is renamed to
// <path>.<UTC time>, a new one started, and the oldest rotated files
// removed so that at most maxFiles remain, the current one included.
// Every file is at most maxSize.
type logWriter struct {
	mu       sync.Mutex
	path     string
	f        *os.File
	size     int64
	maxSize  int64 // 0: never rotated
	maxFiles int
}

// openLog opens (appending) the log at path.
func openLog(path string, maxSize int64, maxFiles int) (*logWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &logWriter{path: path, f: f, size: fi.Size(), maxSize: maxSize, maxFiles: maxFiles}, nil
}

func (w *logWriter) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}

func (w *logWriter) record(stream string, line []byte, partial bool) {
	tag := " F "
	if partial {
		tag = " P "
	}
	var b bytes.Buffer
	b.Grow(len(line) + 48)
	b.WriteString(time.Now().UTC().Format(time.RFC3339Nano))
	b.WriteByte(' ')
	b.WriteString(stream)
	b.WriteString(tag)
	b.Write(line)
	b.WriteByte('\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.maxSize > 0 && w.size > 0 && w.size+int64(b.Len()) > w.maxSize {
		if err := w.rotate(); err != nil {
			return // the record is dropped rather than the limit passed
		}
	}
	n, _ := w.f.Write(b.Bytes())
	w.size += int64(n)
}

// rotate renames the current file aside, starts a new one and removes
// rotated files beyond maxFiles-1. Called with mu held.
func (w *logWriter) rotate() error {
	rotated := w.path + "." + time.Now().UTC().Format("20060102-150405.000000000")
	if err := os.Rename(w.path, rotated); err != nil {
		return err
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_ = w.f.Close()
	w.f, w.size = f, 0
	old, _ := RotatedLogs(w.path)
	for len(old) > w.maxFiles-1 {
		_ = os.Remove(old[0])
		old = old[1:]
	}
	return nil
}

// RotatedLogs lists the rotated files of the log at path, oldest first.
func RotatedLogs(path string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	prefix := filepath.Base(path) + "."
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && !e.IsDir() {
			out = append(out, filepath.Join(filepath.Dir(path), e.Name()))
		}
	}
	sort.Strings(out) // the UTC time suffix sorts by age
	return out, nil
}

// copy reads r line by line until EOF and records each line. Output left
// without a newline at EOF is a partial record, as containerd's CRI log
// redirection writes it, so that readers (kubectl logs, a
// FallbackToLogsOnError termination message) add no newline the
// container did not write.
func (w *logWriter) copy(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			w.record(stream, line[:len(line)-1], false)
		case errors.Is(err, bufio.ErrBufferFull):
			w.record(stream, line, true)
		default:
			if len(line) > 0 {
				w.record(stream, line, true)
			}
			return
		}
	}
}

// LogRecord is one record of a CRI-format log.
type LogRecord struct {
	Time    time.Time
	Stream  string // stdout or stderr
	Partial bool
	Text    []byte
}

// ParseLogRecord parses one CRI log line (without its newline).
func ParseLogRecord(line []byte) (LogRecord, bool) {
	var r LogRecord
	f := bytes.SplitN(line, []byte{' '}, 4)
	if len(f) < 3 {
		return r, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(f[0]))
	if err != nil {
		return r, false
	}
	r.Time, r.Stream, r.Partial = t, string(f[1]), string(f[2]) == "P"
	if len(f) == 4 {
		r.Text = f[3]
	}
	return r, true
}

// CopyLog writes the text of the CRI log at path to w (records joined back
// into lines). With follow it keeps reading as the log grows until ctx ends
// or stop returns true (checked whenever the end is reached, e.g. "the
// container has exited").
func CopyLog(ctx context.Context, w io.Writer, path string, follow bool, stop func() bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var pending []byte
	for {
		line, err := br.ReadBytes('\n')
		if err == nil {
			if rec, ok := ParseLogRecord(line[:len(line)-1]); ok {
				if _, err := w.Write(rec.Text); err != nil {
					return err
				}
				if !rec.Partial {
					if _, err := w.Write([]byte{'\n'}); err != nil {
						return err
					}
				}
			}
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		// At the end: keep an incomplete line for the next round.
		pending = append(pending[:0], line...)
		if !follow || (stop != nil && stop()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		br = bufio.NewReader(io.MultiReader(bytes.NewReader(pending), f))
	}
}

// LogStart is the offset in the CRI log r where reading starts for the
// last tail whole lines (tail < 0: all) of those written at or after since
// (zero: any), kubelet's tailLines and sinceTime. A line is the records up
// to and including a full ("F") one. It reads r once, forward; the
// offsets it keeps are at most tail.
func LogStart(r io.Reader, tail int64, since time.Time) (int64, error) {
	if tail == 0 {
		return -1, nil // nothing: the caller starts at the end
	}
	keep := int(min(max(tail, 0), 1<<20))
	var (
		starts    []int64 // ring of the last keep line starts (after since)
		next      int     // ring position once full
		off, line int64   // current offset, start of the current line
		br        = bufio.NewReaderSize(r, maxLogLine+64)
		sinceOff  = int64(-1)
		partial   time.Time // the time of a last line's partial records, not yet ended by a full one
	)
	add := func(at time.Time) { // a line starts at line
		if sinceOff < 0 && (since.IsZero() || !at.Before(since)) {
			sinceOff = line
		}
		if sinceOff >= 0 && tail > 0 {
			if len(starts) < keep {
				starts = append(starts, line)
			} else {
				starts[next] = line
				next = (next + 1) % keep
			}
		}
	}
	for {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) { // not a record of ours: skip it whole
			for errors.Is(err, bufio.ErrBufferFull) {
				off += int64(len(b))
				b, err = br.ReadSlice('\n')
			}
			off += int64(len(b))
			line = off
			continue
		}
		if err != nil {
			break // an incomplete last record is not read yet
		}
		rec, ok := ParseLogRecord(b[:len(b)-1])
		off += int64(len(b))
		if !ok {
			continue
		}
		if rec.Partial {
			if partial.IsZero() {
				partial = rec.Time
			}
			continue
		}
		add(rec.Time)
		partial = time.Time{}
		line = off
	}
	if !partial.IsZero() { // output the container left without a final newline is a line too
		add(partial)
	}
	switch {
	case sinceOff < 0:
		return -1, nil // nothing since then
	case tail < 0 || len(starts) < keep:
		return sinceOff, nil
	}
	return starts[next], nil
}

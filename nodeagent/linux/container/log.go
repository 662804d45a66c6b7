package container

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// maxLogLine is the longest line written as one record; longer lines are
// split into partial ("P") records, as the CRI log format does.
const maxLogLine = 16 << 10

// logWriter appends CRI-format records ("<RFC3339Nano> <stream> <F|P>
// <text>\n") for several streams to one file.
type logWriter struct {
	mu sync.Mutex
	f  *os.File
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
	_, _ = w.f.Write(b.Bytes())
	w.mu.Unlock()
}

// copy reads r line by line until EOF and records each line.
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
				w.record(stream, line, false)
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

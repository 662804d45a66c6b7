package container

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLogRotation: a writer past its max size leaves at most maxFiles
// files, none larger than maxSize, the newest records in the current file.
func TestLogRotation(t *testing.T) {
	for _, tc := range []struct {
		name              string
		maxSize           int64
		maxFiles, records int
		line              int
	}{
		{name: "small records", maxSize: MinLogMaxSize, maxFiles: 3, records: 5000, line: 100},
		{name: "longest records", maxSize: MinLogMaxSize, maxFiles: 2, records: 100, line: maxLogLine},
		{name: "kubelet's defaults, 25 MiB written", maxSize: DefaultLogMaxSize, maxFiles: DefaultLogMaxFiles, records: 25 << 10, line: 1 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "0.log")
			w, err := openLog(path, tc.maxSize, tc.maxFiles)
			if err != nil {
				t.Fatal(err)
			}
			text := bytes.Repeat([]byte("x"), tc.line)
			for i := range tc.records {
				w.record("stdout", append([]byte(fmt.Sprintf("%08d ", i)), text...), false)
			}
			if err := w.close(); err != nil {
				t.Fatal(err)
			}
			rotated, err := RotatedLogs(path)
			if err != nil {
				t.Fatal(err)
			}
			files := append(rotated, path)
			if len(files) > tc.maxFiles || len(rotated) == 0 {
				t.Fatalf("%d files %v, want 2..%d", len(files), files, tc.maxFiles)
			}
			for _, f := range files {
				fi, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Size() > tc.maxSize {
					t.Errorf("%s is %d bytes, more than %d", f, fi.Size(), tc.maxSize)
				}
			}
			cur, _ := os.ReadFile(path)
			if want := fmt.Sprintf("%08d ", tc.records-1); !bytes.Contains(cur, []byte(want)) {
				t.Errorf("the current file lacks the last record %q", want)
			}
		})
	}
}

func TestLogStart(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	rec := func(sec int, tag, text string) int64 {
		off := int64(b.Len())
		fmt.Fprintf(&b, "%s stdout %s %s\n", t0.Add(time.Duration(sec)*time.Second).Format(time.RFC3339Nano), tag, text)
		return off
	}
	l0 := rec(0, "F", "zero")
	l1 := rec(1, "P", "one-")
	rec(1, "F", "and-a-half")
	l2 := rec(2, "F", "two")
	l3 := rec(3, "F", "three")
	b.WriteString("2026-01-01T00:00:04Z stdout F incomplete") // no newline yet
	for _, tc := range []struct {
		name  string
		tail  int64
		since time.Time
		want  int64
	}{
		{"all", -1, time.Time{}, l0},
		{"tail 1", 1, time.Time{}, l3},
		{"tail 3: a partial record starts its line", 3, time.Time{}, l1},
		{"tail past the start", 100, time.Time{}, l0},
		{"tail 0", 0, time.Time{}, -1},
		{"since 2s", -1, t0.Add(2 * time.Second), l2},
		{"since between records", -1, t0.Add(1500 * time.Millisecond), l2},
		{"since and tail: the later", 3, t0.Add(3 * time.Second), l3},
		{"since the future", -1, t0.Add(time.Hour), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LogStart(bytes.NewReader(b.Bytes()), tc.tail, tc.since)
			if err != nil || got != tc.want {
				t.Fatalf("LogStart = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	if got, _ := LogStart(strings.NewReader(strings.Repeat("y", 3*maxLogLine)+"\n"+b.String()), 1, time.Time{}); got != int64(3*maxLogLine+1)+l3 {
		t.Fatalf("after an overlong line: %d", got)
	}
}

// TestLogCopyUnterminated: output without a final newline is kept as a
// partial record, so that reading the log back gives exactly what the
// container wrote (the FallbackToLogsOnError conformance test's
// "echo -n DONE" is "DONE", not "DONE\n").
func TestLogCopyUnterminated(t *testing.T) {
	for _, tc := range []struct{ name, written string }{
		{"no newline", "DONE"},
		{"lines then none", "a\nb\nDONE"},
		{"newline", "a\nDONE\n"},
		{"empty line last", "a\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "0.log")
			w, err := openLog(path, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			w.copy("stdout", strings.NewReader(tc.written))
			if err := w.close(); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := CopyLog(t.Context(), &got, path, false, nil); err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.written {
				t.Errorf("read back %q, written %q", got.String(), tc.written)
			}
			// The last line, newline or not, is the tail of one line
			// (FallbackToLogsOnError reads the log's end so).
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			off, err := LogStart(f, 1, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			lines := strings.SplitAfter(strings.TrimSuffix(tc.written, "\n"), "\n")
			last := lines[len(lines)-1]
			if off < 0 || !strings.HasSuffix(string(b[off:]), last+"\n") || strings.Count(string(b[off:]), "\n") != 1 {
				t.Errorf("tail 1 starts at %d: %q, want the record of %q", off, b[max(off, 0):], last)
			}
		})
	}
}

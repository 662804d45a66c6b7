package roles

import (
	"bytes"
	"testing"

	"github.com/podflow/podflow/services/nodeexec"
)

func TestWriteCRI(t *testing.T) {
	cri := []byte("2026-01-01T00:00:00Z stdout F hello\n" +
		"2026-01-01T00:00:00Z stderr F oops\n" +
		"2026-01-01T00:00:00Z stdout P par\n" +
		"2026-01-01T00:00:00Z stdout F tial\n" +
		"garbage\n")
	for _, c := range []struct {
		name           string
		tty            bool
		stdout, stderr string
	}{
		{"streams apart", false, "hello\npartial\n", "oops\n"},
		{"a terminal has one", true, "hello\noops\npartial\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if err := writeCRI(cri, nodeexec.Streams{Stdout: &out, Stderr: &errb}, c.tty); err != nil {
				t.Fatal(err)
			}
			if out.String() != c.stdout || errb.String() != c.stderr {
				t.Errorf("stdout %q stderr %q, want %q %q", out.String(), errb.String(), c.stdout, c.stderr)
			}
		})
	}
}

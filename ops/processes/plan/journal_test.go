package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/ops/processes/supervisor"
)

func TestJournal(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	// Concurrent appends write whole lines.
	whole := &Journal{Path: filepath.Join(t.TempDir(), "processes.log")}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if err := whole.Append(Happening{Time: t0.Add(time.Duration(i) * time.Second), Kind: HappeningKilled, Process: fmt.Sprint("p", i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got, err := ReadJournal(whole.Path, t0, t0.Add(time.Hour)); err != nil || len(got) != 40 {
		t.Fatalf("%d whole lines of 40 (%v)", len(got), err)
	}

	// A full journal is rotated: the newest happenings are kept.
	path := filepath.Join(t.TempDir(), "processes.log")
	j := &Journal{Path: path, MaxBytes: 600}
	for i := range 40 {
		if err := j.Append(Happening{Time: t0.Add(time.Duration(i) * time.Second), Kind: HappeningKilled, Process: fmt.Sprint("p", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path + ".1"); err != nil {
		t.Fatalf("a full journal is rotated: %v", err)
	}
	for _, p := range []string{path, path + ".1"} {
		if fi, err := os.Stat(p); err != nil || fi.Size() > 600+100 {
			t.Fatalf("%s: %v, %d bytes: bounded by MaxBytes and a line", p, err, fi.Size())
		}
	}
	all, err := ReadJournal(path, t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Time.Before(all[i-1].Time) {
			t.Fatalf("not in time order: %v", all)
		}
	}
	if len(all) == 0 || len(all) == 40 {
		t.Fatalf("%d happenings kept of 40 with rotation at 600 bytes: want the newest only", len(all))
	}
	// The range: [from, to).
	some, err := ReadJournal(path, t0.Add(37*time.Second), t0.Add(39*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if g := fmt.Sprint(len(some), " ", some[0].Process, " ", some[1].Process); g != "2 p37 p38" {
		t.Fatalf("got %s, want p37 and p38", g)
	}
	// A torn or foreign line is skipped, a missing journal is empty.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("{not json\n")
	f.Close()
	if again, err := ReadJournal(path, t0, t0.Add(time.Hour)); err != nil || len(again) != len(all) {
		t.Fatalf("after a bad line: %d, %v; want %d", len(again), err, len(all))
	}
	if none, err := ReadJournal(filepath.Join(t.TempDir(), "nope.log"), t0, t0.Add(time.Hour)); err != nil || len(none) != 0 {
		t.Fatalf("a missing journal: %v, %v", none, err)
	}
}

func TestHappeningOf(t *testing.T) {
	at := time.Now()
	for _, tc := range []struct {
		e    supervisor.Event
		want string
	}{
		{supervisor.Event{Kind: supervisor.EventStarted, Name: "api-0"}, "started api-0 "},
		{supervisor.Event{Kind: supervisor.EventStarted, Name: "api-0", Restarts: 2}, "restarted api-0 restart 2"},
		{supervisor.Event{Kind: supervisor.EventExited, Name: "api-0", Signal: "killed", ExitCode: -1}, "killed api-0 killed"},
		{supervisor.Event{Kind: supervisor.EventExited, Name: "api-0", ExitCode: 3}, "exited api-0 exit code 3"},
		{supervisor.Event{Kind: supervisor.EventStopped, Name: "api-0"}, "stopped api-0 "},
	} {
		tc.e.Time = at
		h := HappeningOf(tc.e)
		if g := strings.Join([]string{h.Kind, h.Process, h.Detail}, " "); g != tc.want || !h.Time.Equal(at) {
			t.Errorf("%+v: %q at %s, want %q", tc.e, g, h.Time, tc.want)
		}
	}
}

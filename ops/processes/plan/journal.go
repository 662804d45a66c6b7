package plan

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/podflow/podflow/ops/processes/supervisor"
)

// Happening kinds of the journals: what the supervisor saw (started,
// restarted, exited, killed, stopped) and the faults `podflow chaos`
// injected (paused, resumed, fault, healed).
const (
	HappeningStarted   = "started"
	HappeningRestarted = "restarted"
	HappeningExited    = "exited"
	HappeningKilled    = "killed"
	HappeningStopped   = "stopped"
	HappeningPaused    = "paused"
	HappeningResumed   = "resumed"
	HappeningFault     = "fault"
	HappeningHealed    = "healed"
)

// Happening is one line of a journal (DATA/processes.log, DATA/faults.log):
// something that happened to a process, at the time it happened.
type Happening struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Process string    `json:"process,omitempty"`
	PID     int       `json:"pid,omitempty"`
	// Detail: the exit code or signal, the fault injected.
	Detail string `json:"detail,omitempty"`
}

// JournalMaxBytes is the size at which a journal is rotated: the file is
// renamed to NAME.1 (replacing the older one) and a new one begins, so a
// journal takes at most twice this.
const JournalMaxBytes = 4 << 20

// Journal appends happenings to a file of JSON lines. One process writes
// a journal; Append is safe for concurrent use.
type Journal struct {
	Path string
	// MaxBytes overrides JournalMaxBytes (tests).
	MaxBytes int64

	mu sync.Mutex
}

// Append writes h as one line, rotating the file first when it is full.
func (j *Journal) Append(h Happening) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	limit := j.MaxBytes
	if limit <= 0 {
		limit = JournalMaxBytes
	}
	if fi, err := os.Stat(j.Path); err == nil && fi.Size() >= limit {
		if err := os.Rename(j.Path, j.Path+".1"); err != nil {
			return fmt.Errorf("rotate journal %q: %w", j.Path, err)
		}
	}
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(j.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("journal %q: %w", j.Path, err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadJournal returns the happenings of the journal at path (its rotated
// part first) with from <= Time < to, in time order. A journal that does
// not exist is empty; a line that does not parse is skipped.
func ReadJournal(path string, from, to time.Time) ([]Happening, error) {
	var out []Happening
	for _, p := range []string{path + ".1", path} {
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var h Happening
			if json.Unmarshal(sc.Bytes(), &h) != nil || h.Time.Before(from) || !h.Time.Before(to) {
				continue
			}
			out = append(out, h)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return out, fmt.Errorf("read journal %q: %w", p, err)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Time.Before(out[b].Time) })
	return out, nil
}

// HappeningOf is the journal's line for a supervisor event: a start (a
// restart after the first), an exit (killed when a signal ended it), a
// stop.
func HappeningOf(e supervisor.Event) Happening {
	h := Happening{Time: e.Time, Process: e.Name, PID: e.PID}
	switch e.Kind {
	case supervisor.EventStarted:
		h.Kind = HappeningStarted
		if e.Restarts > 0 {
			h.Kind = HappeningRestarted
			h.Detail = fmt.Sprintf("restart %d", e.Restarts)
		}
	case supervisor.EventExited:
		h.Kind, h.Detail = HappeningExited, fmt.Sprintf("exit code %d", e.ExitCode)
		if e.Signal != "" {
			h.Kind, h.Detail = HappeningKilled, e.Signal
		}
	default:
		h.Kind = HappeningStopped
	}
	return h
}

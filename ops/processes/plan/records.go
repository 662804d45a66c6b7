package plan

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/podflow/podflow/ops/processes/supervisor"
)

// Record is one line of DATA-DIR/children.json: what `podflow up` runs
// now, so that tests and chaos signal exactly the processes podflow
// started, by PID.
type Record struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	PID      int    `json:"pid"`
	Restarts int    `json:"restarts"`
	// Started is when its current process started (after a kill: when
	// the supervisor brought it back).
	Started time.Time `json:"started,omitzero"`
}

// Kind is the process role of r ("stage/scheduler" → StageKind).
func (r Record) Kind() Kind { return Kind(strings.SplitN(r.Role, "/", 2)[0]) }

// Chaos targets: the names `podflow chaos --targets` takes, each a kind
// of process.
var Targets = []struct {
	Name string
	Kind Kind
}{{"stages", StageKind}, {"store", Store}, {"nodeagent", NodeAgent}, {"nats", NATS}}

// TargetKind returns the kind of process a chaos target names.
func TargetKind(target string) (Kind, bool) {
	for _, t := range Targets {
		if t.Name == target {
			return t.Kind, true
		}
	}
	return "", false
}

// Records are the supervisor's children as records.
func Records(kids []supervisor.Child) []Record {
	recs := make([]Record, 0, len(kids))
	for _, k := range kids {
		recs = append(recs, Record{Name: k.Spec.Name, Role: k.Spec.Role, PID: k.PID, Restarts: k.Restarts, Started: k.Started})
	}
	return recs
}

// WriteRecords replaces the file at path with recs atomically.
func WriteRecords(path string, recs []Record) error {
	b, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadRecords reads the records at path.
func ReadRecords(path string) ([]Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []Record
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, err
	}
	return recs, nil
}

// ErrNoVictim is returned by Victims when no running process is a target.
var ErrNoVictim = errors.New("no running process among the targets")

// Victims returns the running processes (PID > 0) of the target kinds.
func Victims(recs []Record, kinds map[Kind]bool) ([]Record, error) {
	var pool []Record
	for _, r := range recs {
		if kinds[r.Kind()] && r.PID > 0 {
			pool = append(pool, r)
		}
	}
	if len(pool) == 0 {
		return nil, ErrNoVictim
	}
	return pool, nil
}

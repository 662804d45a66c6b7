package nemesis

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/podflow/podflow/raftstore/linearize"
)

// Op is a register operation on one key of a history.
type Op int

// The operations of a history: a read, a create, a compare-and-swap
// update (of the revision read) and an unconditional delete.
const (
	OpGet Op = iota
	OpCreate
	OpUpdate
	OpDelete
)

func (o Outcome) String() string { return [...]string{"ok", "not-found", "conflict", "unknown"}[o] }

func (o Op) String() string { return [...]string{"get", "create", "update", "delete"}[o] }

// Outcome is how an operation ended, as its client saw it.
type Outcome int

const (
	// OK: done (get: found; create/update/delete: applied).
	OK Outcome = iota
	// NotFound: the key did not exist.
	NotFound
	// Conflict: create of an existing key, or an update whose expected
	// revision was not the current one.
	Conflict
	// Unknown: no answer, or a failure that does not say whether the
	// write was applied (a timeout, a 5xx). It may take effect at any
	// time after its call, or never.
	Unknown
)

// Input is what a client asked.
type Input struct {
	Op     Op
	Key    string
	Value  string // create, update
	Expect int64  // update: the revision it replaces
}

// Output is what it was told.
type Output struct {
	Outcome Outcome
	Value   string // get
	Rev     int64  // get, create, update: the object's revision
}

// History records operations from concurrent clients. Safe for
// concurrent use.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	extra int
}

// NewHistory starts an empty history.
func NewHistory() *History { return &History{start: time.Now(), extra: 1 << 20} }

// Now is the history's clock, for an operation's call time.
func (h *History) Now() int64 { return time.Since(h.start).Nanoseconds() }

// Add records an operation of client called at call (from Now) that has
// just returned. An Unknown write never returns: it may take effect at
// any later time, and its client goes on as a new one.
func (h *History) Add(client int, in Input, out Output, call int64) {
	ret := h.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if out.Outcome == Unknown {
		ret = math.MaxInt64 / 2
		h.extra++
		client = h.extra
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
}

// Len is the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Counts are the operations recorded by kind and outcome, for reports.
func (h *History) Counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, op := range h.ops {
		in, o := op.Input.(Input), op.Output.(Output)
		out[in.Op.String()+"/"+o.Outcome.String()]++
	}
	return out
}

// Check checks the history for linearizability against a register per
// key, giving up after limit (porcupine.Unknown).
func (h *History) Check(limit time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	return porcupine.CheckOperationsVerbose(Model.ToModel(), ops, limit)
}

// WriteJSON writes the history, one operation per line, ordered by call.
func (h *History) WriteJSON(w io.Writer) error {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	enc := json.NewEncoder(w)
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if err := enc.Encode(map[string]any{"client": op.ClientId, "call": op.Call, "return": op.Return,
			"op": in.Op.String(), "key": in.Key, "value": in.Value, "expect": in.Expect,
			"outcome": out.Outcome.String(), "got": out.Value, "rev": out.Rev}); err != nil {
			return err
		}
	}
	return nil
}

// register is the model's state of one key; rev -1 is "exists with a
// revision not yet observed" (after a write of unknown outcome).
type register struct {
	exists bool
	value  string
	rev    int64
}

// Model is a versioned register per key: what podflow's store promises
// through the API — linearizable reads, creates that fail on an existing
// key, updates applied only to the revision they name, deletes.
var Model = porcupine.NondeterministicModel{
	Partition: linearize.ByKey(func(in Input) string { return in.Key }),
	Init:      func() []any { return []any{register{}} },
	Step: func(st, in, out any) []any {
		s, i, o := st.(register), in.(Input), out.(Output)
		revIs := func(r int64) bool { return s.rev == r || s.rev == -1 }
		after := func(applied register) []any {
			if o.Outcome == Unknown {
				return []any{s, applied}
			}
			return []any{applied}
		}
		switch i.Op {
		case OpGet:
			switch {
			case o.Outcome == NotFound && !s.exists:
				return []any{s}
			case o.Outcome == OK && s.exists && s.value == o.Value && revIs(o.Rev):
				return []any{register{true, o.Value, o.Rev}}
			}
		case OpCreate:
			switch {
			case (o.Outcome == OK || o.Outcome == Unknown) && !s.exists:
				rev := o.Rev
				if o.Outcome == Unknown {
					rev = -1
				}
				return after(register{true, i.Value, rev})
			case o.Outcome == Unknown, o.Outcome == Conflict && s.exists:
				return []any{s}
			}
		case OpUpdate:
			switch {
			case (o.Outcome == OK || o.Outcome == Unknown) && s.exists && revIs(i.Expect) && (o.Outcome == Unknown || o.Rev > i.Expect):
				rev := o.Rev
				if o.Outcome == Unknown {
					rev = -1
				}
				return after(register{true, i.Value, rev})
			case o.Outcome == Unknown,
				o.Outcome == Conflict && s.exists && s.rev != i.Expect,
				o.Outcome == NotFound && !s.exists:
				return []any{s}
			}
		case OpDelete:
			switch {
			case (o.Outcome == OK || o.Outcome == Unknown) && s.exists:
				return after(register{})
			case o.Outcome == Unknown, o.Outcome == NotFound && !s.exists:
				return []any{s}
			}
		}
		return nil
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(Input), out.(Output)
		return fmt.Sprintf("%s(%s %q expect %d) -> %v %q@%d", i.Op, i.Key, i.Value, i.Expect, o.Outcome, o.Value, o.Rev)
	},
}

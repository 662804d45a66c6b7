package nemesis

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// seq records ops one after another (client 1), each call after the
// previous return.
func seq(steps ...[2]any) *History {
	h := NewHistory()
	for _, s := range steps {
		call := h.Now()
		h.Add(1, s[0].(Input), s[1].(Output), call)
	}
	return h
}

func step(in Input, out Output) [2]any { return [2]any{in, out} }

func TestModel(t *testing.T) {
	get := func(k string) Input { return Input{Op: OpGet, Key: k} }
	create := func(k, v string) Input { return Input{Op: OpCreate, Key: k, Value: v} }
	update := func(k, v string, rev int64) Input { return Input{Op: OpUpdate, Key: k, Value: v, Expect: rev} }
	del := func(k string) Input { return Input{Op: OpDelete, Key: k} }
	for _, tc := range []struct {
		name  string
		h     *History
		legal bool
	}{
		{"create get update delete", seq(
			step(get("a"), Output{Outcome: NotFound}),
			step(create("a", "1"), Output{Rev: 5}),
			step(get("a"), Output{Value: "1", Rev: 5}),
			step(update("a", "2", 5), Output{Rev: 7}),
			step(update("a", "3", 5), Output{Outcome: Conflict}),
			step(create("a", "x"), Output{Outcome: Conflict}),
			step(del("a"), Output{}),
			step(del("a"), Output{Outcome: NotFound}),
		), true},
		{"an unknown write may have happened", seq(
			step(create("a", "1"), Output{Outcome: Unknown}),
			step(get("a"), Output{Value: "1", Rev: 9}),
			step(update("a", "2", 9), Output{Outcome: Unknown}),
			step(get("a"), Output{Value: "1", Rev: 9}),
		), true},
		{"stale read", seq(
			step(create("a", "1"), Output{Rev: 5}),
			step(update("a", "2", 5), Output{Rev: 6}),
			step(get("a"), Output{Value: "1", Rev: 5}),
		), false},
		{"lost acknowledged create", seq(
			step(create("a", "1"), Output{Rev: 5}),
			step(get("a"), Output{Outcome: NotFound}),
		), false},
		{"update of a deleted key succeeds", seq(
			step(create("a", "1"), Output{Rev: 5}),
			step(del("a"), Output{}),
			step(update("a", "2", 5), Output{Rev: 8}),
		), false},
		{"update applied to another revision", seq(
			step(create("a", "1"), Output{Rev: 5}),
			step(update("a", "2", 5), Output{Rev: 6}),
			step(update("a", "3", 5), Output{Rev: 7}),
		), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := tc.h.Check(10 * time.Second)
			if got := res == porcupine.Ok; got != tc.legal {
				t.Fatalf("linearizable = %v (%v), want %v", got, res, tc.legal)
			}
		})
	}
}

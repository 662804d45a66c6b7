package linearize_test

import (
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/podflow/podflow/raftstore/linearize"
)

type write struct{ key, value string }

func TestByKey(t *testing.T) {
	op := func(client int, key, value string) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: write{key, value}}
	}
	tests := []struct {
		name  string
		given []porcupine.Operation
		want  [][]string // values, per partition
	}{
		{"empty", nil, [][]string{}},
		{"one key", []porcupine.Operation{op(0, "a", "1"), op(1, "a", "2")}, [][]string{{"1", "2"}}},
		{"keys in the order they first appear, operations in theirs",
			[]porcupine.Operation{op(0, "b", "1"), op(1, "a", "2"), op(2, "b", "3"), op(0, "c", "4"), op(1, "a", "5")},
			[][]string{{"1", "3"}, {"2", "5"}, {"4"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := [][]string{}
			for _, part := range linearize.ByKey(func(w write) string { return w.key })(tc.given) {
				var vs []string
				for _, o := range part {
					vs = append(vs, o.Input.(write).value)
				}
				got = append(got, vs)
			}
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("partitions %v, want %v", got, tc.want)
			}
		})
	}
}

// TestByKeyChecksEachKeyAlone: with ByKey, a register model accepts a
// history whose keys interleave — each key's writes then reads are
// linearizable alone — and still refuses a stale read of one key.
func TestByKeyChecksEachKeyAlone(t *testing.T) {
	type in struct {
		key   string
		write bool
		value string
	}
	model := porcupine.Model{
		Partition: linearize.ByKey(func(i in) string { return i.key }),
		Init:      func() any { return "" },
		Step: func(st, input, output any) (bool, any) {
			i := input.(in)
			if i.write {
				return true, i.value
			}
			return output.(string) == st.(string), st
		},
	}
	op := func(call int64, i in, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: int(call), Input: i, Output: out, Call: call, Return: call + 1}
	}
	good := []porcupine.Operation{
		op(0, in{"a", true, "1"}, ""), op(2, in{"b", true, "2"}, ""),
		op(4, in{"a", false, ""}, "1"), op(6, in{"b", false, ""}, "2"),
	}
	if res := porcupine.CheckOperationsTimeout(model, good, 10*time.Second); res != porcupine.Ok {
		t.Errorf("interleaved keys: %v, want Ok", res)
	}
	stale := append(slices.Clone(good), op(8, in{"a", true, "3"}, ""), op(10, in{"a", false, ""}, "1"))
	if res := porcupine.CheckOperationsTimeout(model, stale, 10*time.Second); res != porcupine.Illegal {
		t.Errorf("a stale read: %v, want Illegal", res)
	}
}

package linearize

import "github.com/anishathalye/porcupine"

// ByKey returns a porcupine Partition that splits a history into one
// history per key — key(input) of each operation's Input, of type I — in
// the order each key first appears, each keeping its operations' order.
// An operation whose Input is not an I panics, as a model's Step would.
func ByKey[I any](key func(I) string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := key(op.Input.(I))
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	}
}

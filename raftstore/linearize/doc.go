// Package linearize holds what podflow's linearizability checks of a
// key-value history share, so the checkers cannot disagree: ByKey, the
// Partition of a porcupine model whose state is a register per key (each
// key's operations are checked on their own, which keeps the search
// small). The raftstore failover tests and ops/nemesis's History both use
// it; it depends only on porcupine.
//
// Example:
//
//	model := porcupine.NondeterministicModel{
//		Partition: linearize.ByKey(func(in Input) string { return in.Key }),
//		Init:      func() []any { return []any{register{}} },
//		Step:      step,
//	}
package linearize

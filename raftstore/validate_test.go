package raftstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/podflow/podflow/proto/storev1"
)

// TestValidateCommandKeyTwice: a txn that touches a key twice is
// refused, whether it has a few ops (compared with each other) or many
// (looked up in a set), and a txn of distinct keys passes either way.
func TestValidateCommandKeyTwice(t *testing.T) {
	ops := func(n int, dup bool) []*storev1.Op {
		var out []*storev1.Op
		for i := range n {
			out = append(out, &storev1.Op{Type: storev1.OpType_OP_TYPE_PUT, Key: fmt.Sprintf("/k%d", i)})
		}
		if dup {
			out = append(out, &storev1.Op{Type: storev1.OpType_OP_TYPE_DELETE, Key: fmt.Sprintf("/k%d", n-1)})
		}
		return out
	}
	for _, tc := range []struct {
		n   int
		dup bool
	}{{1, false}, {2, true}, {8, false}, {7, true}, {20, false}, {20, true}} {
		t.Run(fmt.Sprintf("ops=%d/dup=%v", tc.n, tc.dup), func(t *testing.T) {
			err := validateCommand(&storev1.Command{IdempotencyKey: "i", Ops: ops(tc.n, tc.dup)})
			if tc.dup != errors.Is(err, ErrInvalid) || (!tc.dup && err != nil) {
				t.Fatalf("validateCommand = %v, want ErrInvalid: %v", err, tc.dup)
			}
		})
	}
}

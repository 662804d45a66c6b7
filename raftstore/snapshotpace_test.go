package raftstore

import "testing"

// TestSnapshotThreshold: the log between snapshots holds about the
// state's bytes at the mean command size, within [base, max].
func TestSnapshotThreshold(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		base                          uint64
		state, appliedBytes, appliedN int64
		want                          uint64
	}{
		{"nothing applied yet", 16384, 0, 0, 0, 16384},
		{"a small state keeps the base", 16384, 1 << 20, 1 << 20, 1000, 16384},
		// 400 MB of pods and events, 3 KB per command: a snapshot per
		// 133,333 entries, ~400 MB of log.
		{"a large state", 16384, 400_000_000, 3_000_000, 1000, 133_333},
		// Lease renewals of 300 bytes over the same state: capped.
		{"small commands over a large state", 16384, 400_000_000, 300_000, 1000, maxSnapshotThreshold},
		{"commands larger than the state", 64, 1000, 1_000_000, 10, 64},
	} {
		if got := snapshotThreshold(tc.base, tc.state, tc.appliedBytes, tc.appliedN); got != tc.want {
			t.Errorf("%s: snapshotThreshold(%d, %d, %d, %d) = %d, want %d", tc.name, tc.base, tc.state, tc.appliedBytes, tc.appliedN, got, tc.want)
		}
	}
}

// TestAppliedBytesCounted: the fsm counts the bytes and entries of the
// commands it applies, which snapshotThreshold reads.
func TestAppliedBytesCounted(t *testing.T) {
	f := newFSM(100, 0, 10)
	apply(t, f, put("/a", "0123456789", "w1"))
	apply(t, f, put("/b", "0123456789", "w2"))
	state, b, n := f.snapshotLoad()
	if n != 2 || b <= 20 || state <= 0 {
		t.Fatalf("snapshotLoad() = state %d, %d bytes in %d entries; want 2 entries of more than 10 bytes each", state, b, n)
	}
}

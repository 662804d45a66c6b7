package cgroups

import "testing"

func TestWorkingSet(t *testing.T) {
	for _, tc := range []struct {
		usage, inactive, want uint64
	}{
		{100 << 20, 30 << 20, 70 << 20}, // the inactive file cache is not working set
		{100 << 20, 0, 100 << 20},
		{10 << 20, 12 << 20, 0}, // read one after the other: never below 0
	} {
		if got := workingSet(tc.usage, tc.inactive); got != tc.want {
			t.Errorf("workingSet(%d, %d) = %d, want %d", tc.usage, tc.inactive, got, tc.want)
		}
	}
}

package scheduler

import (
	"slices"
	"testing"
	"time"
)

func TestSortDue(t *testing.T) {
	t0 := time.Now()
	due := []dueItem{
		{uid: "low-old", priority: 0, since: t0},
		{uid: "high-new", priority: 1000, since: t0.Add(2 * time.Second)},
		{uid: "low-new", priority: 0, since: t0.Add(time.Second)},
		{uid: "high-old", priority: 1000, since: t0.Add(time.Second)},
		{uid: "negative", priority: -5, since: t0.Add(-time.Hour)},
	}
	sortDue(due)
	var got []string
	for _, d := range due {
		got = append(got, d.uid)
	}
	if want := []string{"high-old", "high-new", "low-old", "low-new", "negative"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

package trace

import (
	"testing"
	"time"
)

// TestFold: a run of identical retries becomes one entry with a count and
// the time of the last; a different step starts a new entry.
func TestFold(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := func(s int, event, detail string) Entry {
		return Entry{Time: t0.Add(time.Duration(s) * time.Second), Stage: "scheduler", Event: event, Detail: detail}
	}
	got := Fold([]Entry{e(0, "PodPersisted", ""), e(1, "PodUnschedulable", "0/3 nodes"), e(11, "PodUnschedulable", "0/3 nodes"),
		e(21, "PodUnschedulable", "0/3 nodes"), e(30, "PodUnschedulable", "0/4 nodes"), e(31, "PodScheduled", "node=n1")})
	if len(got) != 4 || got[1].Repeats != 3 || !got[1].Last.Equal(t0.Add(21*time.Second)) || got[2].Repeats != 0 || got[3].Event != "PodScheduled" {
		t.Fatalf("folded: %+v", got)
	}
}

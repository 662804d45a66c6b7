package console

import (
	"fmt"
	"testing"
	"time"

	"github.com/podflow/podflow/ops/processes/plan"
)

func TestTimelineMarks(t *testing.T) {
	t0 := time.Now()
	var tl timeline
	kids := func(schedPID, restarts int) []plan.Record {
		return []plan.Record{{Name: "api-1", PID: 10}, {Name: "scheduler-1", PID: schedPID, Restarts: restarts}}
	}
	steps := []struct {
		kids     []plan.Record
		answered map[string]bool
		want     string
	}{
		{kids(20, 0), map[string]bool{"api-1": true, "scheduler-1": true}, "[]"},
		{kids(21, 1), map[string]bool{"api-1": true, "scheduler-1": true}, "[restarted scheduler-1]"},
		{kids(21, 1), map[string]bool{"scheduler-1": true}, "[silent api-1]"},
		{kids(21, 1), map[string]bool{"api-1": true, "scheduler-1": true}, "[answering api-1]"},
		{nil, map[string]bool{"api-1": true, "scheduler-1": true}, "[]"}, // no children file: no marks
	}
	for i, s := range steps {
		t.Run(fmt.Sprint("poll ", i), func(t *testing.T) {
			before := len(tl.marks)
			tl.add(t0.Add(time.Duration(i)*time.Second), []Stage{{Redelivered: i, AckPending: 1, Pending: 2}, {Redelivered: 1}}, s.kids, s.answered)
			var got []string
			for _, m := range tl.marks[before:] {
				got = append(got, m.Kind+" "+m.Process)
			}
			if g := fmt.Sprint(got); g != s.want {
				t.Fatalf("marks %s, want %s", g, s.want)
			}
			if p := tl.points[len(tl.points)-1]; p.Redelivered != i+1 || p.AckPending != 1 || p.Pending != 2 {
				t.Fatalf("point %+v", p)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		for i := range 2 * TimelineLen {
			tl.add(t0.Add(time.Duration(10+i)*time.Second), nil, nil, nil)
		}
		if len(tl.points) != TimelineLen || len(tl.marks) != 0 {
			t.Fatalf("%d points, %d marks", len(tl.points), len(tl.marks))
		}
	})
}

package console

import (
	"fmt"
	"testing"
	"time"
)

func TestPingMarks(t *testing.T) {
	t0 := time.Now()
	var p pings
	steps := []struct {
		answered map[string]bool
		want     string
	}{
		{map[string]bool{"api-1": true, "scheduler-1": true}, "[]"}, // the first poll: nothing to compare
		{map[string]bool{"api-1": true, "scheduler-1": true}, "[]"},
		{map[string]bool{"scheduler-1": true}, "[silent api-1]"},
		{map[string]bool{"api-1": true, "scheduler-1": true}, "[answering api-1]"},
	}
	for i, s := range steps {
		t.Run(fmt.Sprint("poll ", i), func(t *testing.T) {
			before := len(p.marks)
			p.add(t0.Add(time.Duration(i)*time.Second), s.answered)
			var got []string
			for _, m := range p.marks[before:] {
				got = append(got, m.Kind+" "+m.Process)
			}
			if g := fmt.Sprint(got); g != s.want {
				t.Fatalf("marks %s, want %s", g, s.want)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		for i := range 2 * maxMarks {
			p.add(t0.Add(time.Duration(10+i)*time.Second), map[string]bool{fmt.Sprint("r-", i%2): true})
		}
		if len(p.marks) != maxMarks {
			t.Fatalf("%d marks, want at most %d", len(p.marks), maxMarks)
		}
		p.add(t0.Add(time.Hour), map[string]bool{"r-0": true, "r-1": true})
		if len(p.marks) != 1 {
			t.Fatalf("%d marks after %s, want only the new one", len(p.marks), MarksKeep)
		}
	})
}

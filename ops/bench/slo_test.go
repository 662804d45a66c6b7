package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestLatencyPercentiles: the percentiles are clusterloader2's, the
// ⌈n·p/100⌉-th smallest, whatever order the sample came in.
func TestLatencyPercentiles(t *testing.T) {
	for _, tc := range []struct {
		name               string
		sample             []int // ms
		p50, p90, p99, max float64
	}{
		{"empty", nil, 0, 0, 0, 0},
		{"one", []int{7}, 7, 7, 7, 7},
		{"1..100 reversed", func() []int {
			var s []int
			for i := 100; i >= 1; i-- {
				s = append(s, i)
			}
			return s
		}(), 50, 90, 99, 100},
		// ⌈10·0.5⌉ = 5th, ⌈10·0.9⌉ = 9th, ⌈10·0.99⌉ = 10th.
		{"ten", []int{10, 1, 9, 2, 8, 3, 7, 4, 6, 5}, 5, 9, 10, 10},
		// ⌈3·0.5⌉ = 2nd.
		{"three", []int{300, 100, 200}, 200, 300, 300, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l latencies
			for _, v := range tc.sample {
				l.add(ms(v))
			}
			s := l.summary()
			if s.N != len(tc.sample) || s.P50ms != tc.p50 || s.P90ms != tc.p90 || s.P99ms != tc.p99 || s.MaxMs != tc.max {
				t.Errorf("summary %+v, want n %d p50 %v p90 %v p99 %v max %v", s, len(tc.sample), tc.p50, tc.p90, tc.p99, tc.max)
			}
		})
	}
}

// TestStartupBookkeeping: a pod's startup runs from its create to the
// first sight of it Running; other phases, later sights and pods whose
// create failed do not count, and pods never seen Running are missing.
func TestStartupBookkeeping(t *testing.T) {
	st := newStartups()
	t0 := time.Unix(1000, 0)
	st.sent("a", t0)
	st.sent("b", t0.Add(ms(10)))
	st.sent("c", t0.Add(ms(20)))
	st.sent("failed", t0)
	st.failed("failed")

	st.observed("a", corev1.PodPending, t0.Add(ms(5)))
	st.observed("a", corev1.PodRunning, t0.Add(ms(300)))
	st.observed("a", corev1.PodRunning, t0.Add(ms(900))) // a later update: not the startup
	st.observed("b", corev1.PodPending, t0.Add(ms(50)))
	st.observed("c", corev1.PodRunning, t0.Add(ms(120)))
	st.observed("failed", corev1.PodRunning, t0.Add(ms(10))) // an older pod of the same name

	if r, c := st.runningOf(); r != 2 || c != 3 {
		t.Errorf("runningOf: %d of %d, want 2 of 3", r, c)
	}
	s := st.summary()
	// a: 300 ms, c: 100 ms; b missing.
	if s.N != 2 || s.Missing != 1 || s.P50ms != 100 || s.P99ms != 300 || s.MaxMs != 300 {
		t.Errorf("summary %+v, want n 2, missing 1, p50 100, p99 300, max 300", s)
	}
	st.observed("b", corev1.PodRunning, t0.Add(ms(4010)))
	if s := st.summary(); s.N != 3 || s.Missing != 0 || s.MaxMs != 4000 {
		t.Errorf("after b ran: %+v, want n 3, missing 0, max 4000", s)
	}
}

// TestPaced: paced calls every name once, spread over (n-1)/rate seconds,
// and counts the failures with the first of them.
func TestPaced(t *testing.T) {
	names := make([]string, 21)
	for i := range names {
		names[i] = fmt.Sprint(i)
	}
	var calls atomic.Int32
	start := time.Now()
	errs, offered := paced(context.Background(), names, 100, func(_ context.Context, name string) error {
		calls.Add(1)
		if name == "3" || name == "7" {
			return errors.New("refused " + name)
		}
		return nil
	})
	if calls.Load() != 21 {
		t.Errorf("%d calls, want 21", calls.Load())
	}
	if errs.n != 2 || errs.first == nil || !strings.HasPrefix(errs.first.Error(), "refused ") {
		t.Errorf("errors %d (first %v), want 2", errs.n, errs.first)
	}
	// The 21st call starts 200 ms after the first: pacing, not a speed goal.
	if offered < 200*time.Millisecond || time.Since(start) < 200*time.Millisecond {
		t.Errorf("21 calls at 100/s started within %s", offered)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls.Store(0)
	paced(ctx, names, 1, func(context.Context, string) error { calls.Add(1); return nil })
	if calls.Load() != 0 {
		t.Errorf("a cancelled context: %d calls, want 0", calls.Load())
	}
}

// TestSLOPrint: each figure is printed beside its SLO, and a p99 over it,
// a failed call or a pod never seen Running is "NOT met".
func TestSLOPrint(t *testing.T) {
	r := &sloResult{Pods: 100, Rate: 80, Offered: 79.5, Saturated: 100,
		Create:  latencySummary{N: 100, P50ms: 12, P99ms: 40, MaxMs: 50},
		Delete:  latencySummary{N: 99, P50ms: 10, P99ms: 1500, MaxMs: 1600},
		Startup: latencySummary{N: 99, P50ms: 300, P99ms: 900, MaxMs: 950, Missing: 1},
	}
	var b bytes.Buffer
	r.print(&b)
	out := b.String()
	t.Log(out)
	lines := strings.Split(out, "\n")
	want := map[string]string{"POST pods": "≤ 1s met", "DELETE pods": "≤ 1s NOT met", "pod startup": "≤ 5s NOT met"}
	for key, verdict := range want {
		found := false
		for _, l := range lines {
			if strings.Contains(l, key) {
				found = true
				if !strings.HasSuffix(l, verdict) {
					t.Errorf("%q: want it to end %q", l, verdict)
				}
			}
		}
		if !found {
			t.Errorf("no line for %s", key)
		}
	}
	if !strings.Contains(out, "80% of the 100 pods/s") {
		t.Errorf("the rate's origin is not printed")
	}
}

package nodeagent

import (
	"testing"
	"time"
)

func TestRetrySchedule(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	def := DefaultConfig("node-1", "10.244.1.0/24")
	s := time.Second
	tests := []struct {
		name   string
		policy Backoff
		want   []time.Duration // delays after 1, 2, ... failures
	}{
		{"CrashLoopBackOff: 10s doubling to 5m", def.CrashLoopBackOff,
			[]time.Duration{10 * s, 20 * s, 40 * s, 80 * s, 160 * s, 5 * time.Minute, 5 * time.Minute}},
		{"ImagePullBackOff: 10s doubling to 5m", def.ImagePullBackOff,
			[]time.Duration{10 * s, 20 * s, 40 * s, 80 * s, 160 * s, 5 * time.Minute}},
		{"SetupBackOff: 500ms doubling to 2m", def.SetupBackOff,
			[]time.Duration{s / 2, s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 64 * s, 2 * time.Minute, 2 * time.Minute}},
		{"Max not a power of two of Initial", Backoff{Initial: 3 * s, Max: 10 * s},
			[]time.Duration{3 * s, 6 * s, 10 * s, 10 * s}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRetry(&tc.policy)
			if !r.Ready(t0) || !r.At().IsZero() || r.Delay() != 0 {
				t.Fatalf("new retry: Ready=%v At=%v Delay=%v, want ready at once", r.Ready(t0), r.At(), r.Delay())
			}
			now := t0
			for i, d := range tc.want {
				at := r.Next(now)
				if r.Delay() != d || !at.Equal(now.Add(d)) || !r.At().Equal(at) {
					t.Fatalf("failure %d at %v: Delay=%v At=%v (returned %v), want %v and %v", i+1, now, r.Delay(), r.At(), at, d, now.Add(d))
				}
				if r.Ready(at.Add(-time.Nanosecond)) || !r.Ready(at) {
					t.Fatalf("failure %d: Ready just before %v = %v, at it = %v", i+1, at, r.Ready(at.Add(-time.Nanosecond)), r.Ready(at))
				}
				if h := r.Halfway(); !h.Equal(now.Add(d / 2)) {
					t.Fatalf("failure %d: Halfway=%v, want %v", i+1, h, now.Add(d/2))
				}
				now = at.Add(time.Millisecond)
			}
			r.Reset()
			if !r.Ready(t0) || !r.At().IsZero() || r.Delay() != 0 {
				t.Fatalf("after Reset: Ready=%v At=%v Delay=%v, want ready at once", r.Ready(t0), r.At(), r.Delay())
			}
			if r.Next(now); r.Delay() != tc.policy.Initial {
				t.Fatalf("first failure after Reset waits %v, want Initial %v", r.Delay(), tc.policy.Initial)
			}
		})
	}
}

func TestRetryForgive(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		resetAfter time.Duration
		ran        time.Duration
		want       time.Duration // the delay after the third failure
	}{
		{"ran shorter than ResetAfter", 10 * time.Minute, 10*time.Minute - 1, 40 * time.Second},
		{"ran exactly ResetAfter", 10 * time.Minute, 10 * time.Minute, 10 * time.Second},
		{"ran longer", 10 * time.Minute, time.Hour, 10 * time.Second},
		{"no ResetAfter", 0, time.Hour, 40 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRetry(&Backoff{Initial: 10 * time.Second, Max: 5 * time.Minute, ResetAfter: tc.resetAfter})
			r.Next(t0)
			r.Next(t0)
			r.Forgive(tc.ran)
			r.Next(t0)
			if r.Delay() != tc.want {
				t.Errorf("delay = %v, want %v", r.Delay(), tc.want)
			}
		})
	}
}

// A worker's retries are nil until their first failure: a nil retry is
// ready at once, and fail makes it under its policy.
func TestRetryNilUntilFailure(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	policy := &Backoff{Initial: 10 * time.Second, Max: time.Minute, ResetAfter: time.Minute}
	var r *retry
	if !r.Ready(t0) || !r.At().IsZero() || r.Delay() != 0 || !r.Halfway().IsZero() {
		t.Fatalf("a nil retry: Ready %v, At %v, Delay %v, Halfway %v; want ready, zero", r.Ready(t0), r.At(), r.Delay(), r.Halfway())
	}
	r.Reset()
	r.Forgive(time.Hour)
	if at := fail(&r, policy, t0); r == nil || at != t0.Add(10*time.Second) {
		t.Fatalf("fail: retry %v, next attempt at %v; want one made, due at %v", r, at, t0.Add(10*time.Second))
	}
	if at := fail(&r, policy, t0); at != t0.Add(20*time.Second) || r.Ready(t0.Add(19*time.Second)) {
		t.Fatalf("second fail: next attempt at %v, want %v", at, t0.Add(20*time.Second))
	}
}

package nodeagent

import "time"

// retry is the schedule of one retried operation under a Backoff policy, as
// kubelet's flowcontrol.Backoff keeps one entry per item: the first failure
// waits policy.Initial, each further one twice as long, up to policy.Max;
// Reset starts over. The worker keeps one for its sandbox, one for its
// volumes, and per container one for restarts (CrashLoopBackOff) and one for
// image pulls (ImagePullBackOff).
//
// A retry that never failed, or was Reset, is Ready at once. It is not safe
// for concurrent use; a worker's retries are its goroutine's alone. policy
// is the node's (its Config's), shared by every retry of the node and
// never modified: a copy in each cost 16 bytes a retry, four a pod.
//
// The worker holds its retries as pointers, nil until the first failure
// (fail) and again once the operation succeeds: most pods never fail, and
// the four retries of a pod with one container cost 160 bytes held
// inline. A nil *retry is one that never failed: every method but Next
// takes it.
type retry struct {
	policy *Backoff
	delay  time.Duration // the current delay; 0 when none
	since  time.Time     // when the current delay began (the last failure)
}

func newRetry(policy *Backoff) retry { return retry{policy: policy} }

// fail records a failure at now in *r, made under policy on the first,
// and returns when the next attempt is due.
func fail(r **retry, policy *Backoff, now time.Time) time.Time {
	if *r == nil {
		*r = &retry{policy: policy}
	}
	return (*r).Next(now)
}

// Next records a failure at now and returns when the next attempt is due.
func (r *retry) Next(now time.Time) time.Time {
	r.delay, r.since = r.policy.Next(r.delay), now
	return r.At()
}

// Reset forgets the failures: the next attempt is due at once, and the next
// failure waits policy.Initial again.
func (r *retry) Reset() {
	if r != nil {
		r.delay, r.since = 0, time.Time{}
	}
}

// Ready reports whether an attempt is due at now.
func (r *retry) Ready(now time.Time) bool { return !now.Before(r.At()) }

// At is when the next attempt is due; zero when one is due at once.
func (r *retry) At() time.Time {
	if r == nil || r.delay == 0 {
		return time.Time{}
	}
	return r.since.Add(r.delay)
}

// Delay is the current delay (0 when none).
func (r *retry) Delay() time.Duration {
	if r == nil {
		return 0
	}
	return r.delay
}

// Halfway is halfway through the current delay. An image pull failure shows
// ErrImagePull for the first half and ImagePullBackOff for the rest.
func (r *retry) Halfway() time.Time {
	if r == nil {
		return time.Time{}
	}
	return r.since.Add(r.delay / 2)
}

// Forgive resets the retry when the operation ran at least
// policy.ResetAfter (when set) before it failed: a container that ran ten
// minutes restarts after Initial again, as kubelet's does.
func (r *retry) Forgive(ran time.Duration) {
	if r != nil && r.policy.ResetAfter > 0 && ran >= r.policy.ResetAfter {
		r.Reset()
	}
}

package api

// Backpressure at the front door. PODFLOW_EVENTS refuses new messages when
// full (DiscardNew), which would refuse the node agents' and stages'
// events of pods already accepted as readily as new pods. So the api stage
// stops accepting new pods first: past EventsHighWater of the stream's
// MaxBytes a pod creation is refused with 429 TooManyRequests (PodRejected,
// reason TooManyRequests) and the last part of the stream stays for the
// pods in flight. The stream's size is read at most once per
// EventsInfoInterval, shared by every request of the replica. And each
// authenticated user creates pods at most UserPodQPS per second (a token
// bucket of UserPodBurst), system:masters exempt as in kube-apiserver's
// priority and fairness.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/stage"
)

// Defaults of the front door's backpressure (see Config).
const (
	DefaultEventsHighWater    = 0.9
	DefaultEventsInfoInterval = time.Second
	DefaultUserPodQPS         = 100
	DefaultUserPodBurst       = 200
	// maxLimiters bounds the per-user buckets kept; past it, full (idle)
	// buckets are dropped.
	maxLimiters = 10000
)

// streamUsage reads a stream's stored bytes and its MaxBytes (0: none).
type streamUsage func(ctx context.Context) (used, limit uint64, err error)

// jetStreamUsage reads PODFLOW_EVENTS' info over js.
func jetStreamUsage(js jetstream.JetStream) streamUsage {
	return func(ctx context.Context) (uint64, uint64, error) {
		st, err := js.Stream(ctx, bus.EventsStream)
		if err != nil {
			return 0, 0, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, 0, err
		}
		return info.State.Bytes, uint64(max(info.Config.MaxBytes, 0)), nil
	}
}

// eventsGauge caches the events stream's usage for interval.
type eventsGauge struct {
	read      streamUsage
	interval  time.Duration
	highWater float64

	mu          sync.Mutex
	at          time.Time
	used, limit uint64
}

// check refuses a new pod while the stream is past the high-water mark.
// A failed read lets the pod through: the stream's own limit still holds.
func (g *eventsGauge) check(ctx context.Context, pod string) *corev1.Status {
	if g == nil || g.read == nil {
		return nil
	}
	g.mu.Lock()
	if time.Since(g.at) >= g.interval {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		used, limit, err := g.read(rctx)
		cancel()
		g.at = time.Now() // a failing read is not retried more often either
		if err == nil {
			g.used, g.limit = used, limit
		}
	}
	used, limit := g.used, g.limit
	g.mu.Unlock()
	if limit == 0 || float64(used) < g.highWater*float64(limit) {
		return nil
	}
	return stage.Failure(429, eventsv1.ReasonTooManyRequests, "pods", pod,
		"the events stream %s holds %d of its %d bytes (EventsMaxBytes), past the high-water mark of %.0f%%: new pods are refused so that pods already accepted can finish; retry later",
		bus.EventsStream, used, limit, 100*g.highWater)
}

// userLimiter is a token bucket per user.
type userLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newUserLimiter(qps float64, burst int) *userLimiter {
	if qps <= 0 {
		return nil
	}
	return &userLimiter{limit: rate.Limit(qps), burst: burst, buckets: map[string]*rate.Limiter{}}
}

// allow takes a token of user's bucket, or refuses with 429.
func (l *userLimiter) allow(user *corev1.UserInfo, pod string) *corev1.Status {
	if l == nil || user == nil || exempt(user) {
		return nil
	}
	name := user.GetUsername()
	l.mu.Lock()
	b := l.buckets[name]
	if b == nil {
		if len(l.buckets) >= maxLimiters {
			for k, v := range l.buckets {
				if v.Tokens() >= float64(l.burst) {
					delete(l.buckets, k)
				}
			}
		}
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[name] = b
	}
	ok := b.Allow()
	l.mu.Unlock()
	if ok {
		return nil
	}
	return stage.Failure(429, eventsv1.ReasonTooManyRequests, "pods", pod,
		"user %q is creating pods faster than the limit of %g per second (burst %d, UserPodQPS): retry later", name, float64(l.limit), l.burst)
}

// exempt: system:masters is not rate limited (kube-apiserver's exempt
// priority level).
func exempt(u *corev1.UserInfo) bool {
	for _, g := range u.GetGroups() {
		if g == "system:masters" {
			return true
		}
	}
	return false
}

// admitPod is the backpressure on one new pod of user, of n bytes, from
// the HTTPS front door: the stream's fill, the user's rate and its share
// of the stream (intake.go).
func (s *Stage) admitPod(ctx context.Context, user *corev1.UserInfo, pod string, n int) *corev1.Status {
	if st := s.events.check(ctx, pod); st != nil {
		return st
	}
	return s.intake.admit(ctx, user, pod, n)
}

// validateBackpressure checks the backpressure fields of c.
func (c Config) validateBackpressure() error {
	switch {
	case c.EventsHighWater <= 0 || c.EventsHighWater > 1:
		return fmt.Errorf("api: EventsHighWater (%g) must be in (0, 1]", c.EventsHighWater)
	case c.EventsInfoInterval <= 0:
		return fmt.Errorf("api: EventsInfoInterval (%s) must be positive", c.EventsInfoInterval)
	case c.UserPodQPS < 0:
		return fmt.Errorf("api: UserPodQPS (%g) must not be negative", c.UserPodQPS)
	case c.UserPodQPS > 0 && c.UserPodBurst < 1:
		return fmt.Errorf("api: UserPodBurst (%d) must be at least 1 with UserPodQPS set", c.UserPodBurst)
	case c.MaxPodRequestBytes < 0:
		return fmt.Errorf("api: MaxPodRequestBytes (%d) must not be negative", c.MaxPodRequestBytes)
	case c.UserEventsShare < 0 || c.UserEventsShare > 1:
		return fmt.Errorf("api: UserEventsShare (%g) must be in [0, 1]", c.UserEventsShare)
	}
	return nil
}

package api

// The bus intake of pod creations, bounded per identity before the
// stream. A user of podflow reaches the events stream only through the
// api stage (its bus identity may not publish there: bus.UserPermissions),
// and the api stage lets a request in only once it is
//
//  1. at most MaxPodRequestBytes (413 RequestEntityTooLarge): junk never
//     reaches the stream, nor, once it fails there, the dead letters;
//  2. decoded and authenticated (400, 401), answering only into the
//     requester's own inbox (checkUserReply);
//  3. within the user's rate (UserPodQPS, UserPodBurst) and its share of
//     the stream (UserEventsShare): a token bucket of bytes holding
//     UserEventsShare/2 of PODFLOW_EVENTS' MaxBytes, refilled at that
//     much per MaxAge, so that what one user's requests hold of the
//     stream at any time — messages live MaxAge — stays below
//     UserEventsShare of it (429 TooManyRequests past it);
//  4. and the stream is below its high-water mark (pressure.go).
//
// system:masters is exempt from 3, as from kube-apiserver's priority and
// fairness; the stages' and nodes' own events never pass here.

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

// Defaults of the intake (see Config).
const (
	// DefaultMaxPodRequestBytes is kube-apiserver's request body limit.
	DefaultMaxPodRequestBytes = 3 << 20
	DefaultUserEventsShare    = 0.1
	// limitsInterval is how long the stream's MaxBytes and MaxAge are used
	// before they are read again.
	limitsInterval = time.Minute
)

// streamLimits reads a stream's MaxBytes (0: none) and MaxAge (0: none).
type streamLimits func(ctx context.Context) (maxBytes int64, maxAge time.Duration, err error)

// jetStreamLimits reads PODFLOW_EVENTS' limits over js.
func jetStreamLimits(js jetstream.JetStream) streamLimits {
	return func(ctx context.Context) (int64, time.Duration, error) {
		st, err := js.Stream(ctx, bus.EventsStream)
		if err != nil {
			return 0, 0, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, 0, err
		}
		return info.Config.MaxBytes, info.Config.MaxAge, nil
	}
}

// intake bounds pod creations per identity (see the file comment).
type intake struct {
	maxBytes int
	share    float64
	limiter  *userLimiter // requests per second
	limits   streamLimits // nil: no share (unit tests)

	mu      sync.Mutex
	readAt  time.Time
	burst   float64 // bytes; 0: no share
	refill  rate.Limit
	buckets map[string]*rate.Limiter
}

func newIntake(cfg Config, limiter *userLimiter) *intake {
	return &intake{maxBytes: cfg.MaxPodRequestBytes, share: cfg.UserEventsShare, limiter: limiter, buckets: map[string]*rate.Limiter{}}
}

// checkSize refuses a request larger than MaxPodRequestBytes.
func (in *intake) checkSize(n int) *corev1.Status {
	if in == nil || in.maxBytes <= 0 || n <= in.maxBytes {
		return nil
	}
	return stage.Failure(413, "RequestEntityTooLarge", "pods", "",
		"the pod creation request is %d bytes, more than the limit of %d (MaxPodRequestBytes)", n, in.maxBytes)
}

// admit takes a pod creation of n bytes from user's rate and share, or
// refuses it with 429.
func (in *intake) admit(ctx context.Context, user *corev1.UserInfo, pod string, n int) *corev1.Status {
	if in == nil || user == nil || exempt(user) {
		return nil
	}
	if st := in.limiter.allow(user, pod); st != nil {
		return st
	}
	return in.takeShare(ctx, user.GetUsername(), pod, n)
}

func (in *intake) takeShare(ctx context.Context, name, pod string, n int) *corev1.Status {
	if in.limits == nil || in.share <= 0 {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if time.Since(in.readAt) >= limitsInterval {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		maxBytes, maxAge, err := in.limits(rctx)
		cancel()
		in.readAt = time.Now() // a failing read is not retried more often either
		if err == nil {
			burst, refill := in.share/2*float64(maxBytes), rate.Limit(0)
			if maxAge > 0 {
				refill = rate.Limit(burst / maxAge.Seconds())
			}
			if burst != in.burst || refill != in.refill {
				in.burst, in.refill, in.buckets = burst, refill, map[string]*rate.Limiter{}
			}
		}
	}
	if in.burst < 1 {
		return nil // no MaxBytes: the stream has no size to share
	}
	b := in.buckets[name]
	if b == nil {
		if len(in.buckets) >= maxLimiters {
			for k, v := range in.buckets {
				if v.Tokens() >= in.burst {
					delete(in.buckets, k)
				}
			}
		}
		b = rate.NewLimiter(in.refill, int(in.burst))
		in.buckets[name] = b
	}
	if b.AllowN(time.Now(), n) {
		return nil
	}
	return stage.Failure(429, eventsv1.ReasonTooManyRequests, "pods", pod,
		"user %q has sent %s of pod creations, its share of %.0f%% of the events stream %s (UserEventsShare): retry later",
		name, bytesString(int64(in.burst)), 100*in.share, bus.EventsStream)
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

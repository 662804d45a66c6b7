package schedsim

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Recorder collects the events of one type from the events stream, by pod
// uid, through an ordered consumer.
type Recorder struct {
	cc jetstream.ConsumeContext

	mu      sync.Mutex
	byUID   map[string][]*eventsv1.Envelope
	changed chan struct{} // closed at the next event
	first   time.Time     // stream time of the first event
	last    time.Time     // stream time of the last event
}

func record(ctx context.Context, js jetstream.JetStream, typ eventsv1.Type) (*Recorder, error) {
	cons, err := js.OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.TypeFilter(typ)}})
	if err != nil {
		return nil, fmt.Errorf("schedsim: record %s: %w", typ, err)
	}
	r := &Recorder{byUID: map[string][]*eventsv1.Envelope{}, changed: make(chan struct{})}
	r.cc, err = cons.Consume(func(m jetstream.Msg) {
		env, err := bus.DecodeEnvelope(m.Data())
		if err != nil {
			return
		}
		stored := time.Now()
		if md, err := m.Metadata(); err == nil {
			stored = md.Timestamp
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.byUID) == 0 && r.first.IsZero() {
			r.first = stored
		}
		r.last = stored
		r.byUID[env.GetPodUid()] = append(r.byUID[env.GetPodUid()], env)
		close(r.changed)
		r.changed = make(chan struct{})
	})
	if err != nil {
		return nil, fmt.Errorf("schedsim: record %s: %w", typ, err)
	}
	return r, nil
}

func (r *Recorder) stop() { r.cc.Stop() }

// Len returns the number of distinct pods seen.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byUID)
}

// Wait blocks until n distinct pods have an event, or ctx is done.
func (r *Recorder) Wait(ctx context.Context, n int) error {
	for {
		r.mu.Lock()
		got, ch := len(r.byUID), r.changed
		r.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("schedsim: %d of %d pods scheduled: %w", got, n, ctx.Err())
		}
	}
}

// Events returns the events of pod uid.
func (r *Recorder) Events(uid string) []*eventsv1.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*eventsv1.Envelope(nil), r.byUID[uid]...)
}

// Last returns the stream time of the last event seen.
func (r *Recorder) Last() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// Phases summarizes the timings the PodScheduled events carry.
type Phases struct {
	Pods                 int
	Filter, Score, Bind  Quantiles
	Conflicts            int64 // sum of the events' conflicts
	PodsWithConflicts    int
	MaxConflictsOfOnePod int32
}

// Quantiles of a duration.
type Quantiles struct{ P50, P99, Max time.Duration }

func (q Quantiles) String() string {
	return fmt.Sprintf("p50 %s  p99 %s  max %s", q.P50, q.P99, q.Max)
}

// Phases returns the timings of the first PodScheduled of every pod seen.
func (r *Recorder) Phases() Phases {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p Phases
	var f, s, b []time.Duration
	for _, envs := range r.byUID {
		ps := envs[0].GetPodScheduled()
		if ps == nil {
			continue
		}
		p.Pods++
		f = append(f, time.Duration(ps.GetFilterNanos()))
		s = append(s, time.Duration(ps.GetScoreNanos()))
		b = append(b, time.Duration(ps.GetBindNanos()))
		p.Conflicts += int64(ps.GetConflicts())
		if ps.GetConflicts() > 0 {
			p.PodsWithConflicts++
		}
		p.MaxConflictsOfOnePod = max(p.MaxConflictsOfOnePod, ps.GetConflicts())
	}
	p.Filter, p.Score, p.Bind = quantiles(f), quantiles(s), quantiles(b)
	return p
}

func quantiles(d []time.Duration) Quantiles {
	if len(d) == 0 {
		return Quantiles{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return Quantiles{P50: at(0.50), P99: at(0.99), Max: d[len(d)-1]}
}

// StreamEvents returns the events of type typ about pod uid in the events
// stream, in stream order.
func (e *Env) StreamEvents(ctx context.Context, uid string, typ eventsv1.Type) ([]*eventsv1.Envelope, error) {
	s, err := e.Conn.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		return nil, err
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.TypeFilter(typ)}})
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(bus.TypeFilter(typ)))
	if err != nil {
		return nil, err
	}
	var total uint64
	for _, n := range info.State.Subjects {
		total += n
	}
	var out []*eventsv1.Envelope
	for range total {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("schedsim: read %s events: %w", typ, err)
		}
		env, err := bus.DecodeEnvelope(m.Data())
		if err != nil {
			return nil, err
		}
		if env.GetPodUid() == uid {
			out = append(out, env)
		}
	}
	return out, nil
}

package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
)

// The timeline's history is read from the events stream itself (the
// flight recorder), not from what the console happened to poll: a console
// started after the events happened shows them.

// Limits of one history request.
const (
	// DefaultHistoryRange is the range shown when none is asked for.
	DefaultHistoryRange = 15 * time.Minute
	// MaxHistoryRange bounds a request's range (the events stream keeps
	// 24 hours by default).
	MaxHistoryRange = 7 * 24 * time.Hour
	// MaxHistoryBuckets bounds a request's buckets.
	MaxHistoryBuckets = 600
	// HistoryBuckets is about how many buckets a range gets when no step
	// is asked for.
	HistoryBuckets = 90
	// DefaultHistoryMaxEvents bounds the messages one request reads; past
	// it the answer is Truncated at ReadTo.
	DefaultHistoryMaxEvents = 1_000_000
	// DefaultHistoryMaxWait bounds the time one request reads.
	DefaultHistoryMaxWait = 10 * time.Second
)

// ErrHistoryQuery is the error of a history request that asks for
// something invalid (the server answers 400 with its message).
var ErrHistoryQuery = errors.New("console: invalid timeline query")

// HistoryQuery selects a range of the events stream and the width of its
// buckets.
type HistoryQuery struct {
	From, To time.Time
	Step     time.Duration
}

// steps are the bucket widths a range is cut into, smallest first.
var steps = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour}

// ParseHistoryQuery reads a request's range (range=15m, or from= and to=
// as RFC 3339 or Unix seconds; to defaults to now) and step (step=10s;
// by default about HistoryBuckets buckets of a round width). Buckets
// start at multiples of the step, so two requests share their buckets.
func ParseHistoryQuery(get func(string) string, now time.Time) (HistoryQuery, error) {
	bad := func(format string, a ...any) (HistoryQuery, error) {
		return HistoryQuery{}, fmt.Errorf("%w: %s", ErrHistoryQuery, fmt.Sprintf(format, a...))
	}
	var q HistoryQuery
	var err error
	q.To = now
	if s := get("to"); s != "" {
		if q.To, err = parseTime(s); err != nil {
			return bad("to must be RFC 3339 or Unix seconds, got %q", s)
		}
	}
	rng := DefaultHistoryRange
	if s := get("range"); s != "" {
		if rng, err = time.ParseDuration(s); err != nil || rng <= 0 {
			return bad("range must be a positive duration such as 15m, got %q", s)
		}
	}
	q.From = q.To.Add(-rng)
	if s := get("from"); s != "" {
		if get("range") != "" {
			return bad("give range or from, not both")
		}
		if q.From, err = parseTime(s); err != nil {
			return bad("from must be RFC 3339 or Unix seconds, got %q", s)
		}
	}
	if !q.From.Before(q.To) {
		return bad("from (%s) must be before to (%s)", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	if d := q.To.Sub(q.From); d > MaxHistoryRange {
		return bad("the range (%s) may be at most %s", d, MaxHistoryRange)
	}
	if s := get("step"); s != "" {
		if q.Step, err = time.ParseDuration(s); err != nil || q.Step < time.Second || q.Step%time.Second != 0 {
			return bad("step must be a whole number of seconds such as 10s, got %q", s)
		}
	} else {
		q.Step = pickStep(q.To.Sub(q.From))
	}
	q.From = q.From.Truncate(q.Step)
	if n := q.buckets(); n > MaxHistoryBuckets {
		return bad("%s in steps of %s is %d buckets, at most %d: widen the step", q.To.Sub(q.From), q.Step, n, MaxHistoryBuckets)
	}
	return q, nil
}

func parseTime(s string) (time.Time, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)), nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// pickStep is the smallest round step that cuts d into at most about
// HistoryBuckets buckets.
func pickStep(d time.Duration) time.Duration {
	for _, s := range steps {
		if d/s <= HistoryBuckets {
			return s
		}
	}
	return steps[len(steps)-1] * time.Duration(math.Ceil(float64(d)/float64(steps[len(steps)-1])/HistoryBuckets))
}

// buckets is how many buckets the range has.
func (q HistoryQuery) buckets() int {
	return int((q.To.Sub(q.From) + q.Step - 1) / q.Step)
}

// History is the events stream over a range, counted per bucket.
type History struct {
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	StepSec int64     `json:"stepSec"`
	// Buckets are the range's buckets in time order, empty ones included.
	Buckets []Bucket `json:"buckets"`
	// Stages and Types are every stage and event type counted, sorted.
	Stages []string `json:"stages"`
	Types  []string `json:"types"`
	// Events counts the events counted (a node's status report counts
	// each step it carries), Messages the stream messages read.
	Events   int `json:"events"`
	Messages int `json:"messages"`
	// Marks are the processes' kills, restarts and faults in the range.
	Marks []Mark `json:"marks"`
	// Truncated says the read stopped early (at the request's limit of
	// messages or time): the buckets after ReadTo are incomplete.
	Truncated bool      `json:"truncated,omitempty"`
	ReadTo    time.Time `json:"readTo,omitzero"`
	// Errors are the sources that could not be read (the marks').
	Errors []string `json:"errors,omitempty"`
}

// Bucket counts the events stored in [Start, Start+step).
type Bucket struct {
	Start time.Time `json:"start"`
	Total int       `json:"total"`
	// Counts is stage → event type → events.
	Counts map[string]map[string]int `json:"counts,omitempty"`
	// Latency is stage → the handling time of its events (the producing
	// stage's handled_start to handled_end), where the events carry it.
	Latency map[string]Latency `json:"latency,omitempty"`
}

// Latency is the handling time of a stage's events in a bucket.
type Latency struct {
	N     int     `json:"n"`
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
}

// Latencies are kept in a histogram of latBuckets log-spaced buckets,
// each 2^(1/4) (19%) wider than the last, from latMin: a quantile is
// the upper bound of the bucket it falls in, so within 19%.
const (
	latBuckets = 96
	latMin     = 10 * time.Microsecond
)

var latBounds = func() [latBuckets]float64 {
	var b [latBuckets]float64
	for i := range b {
		b[i] = float64(latMin) * math.Pow(2, float64(i)/4)
	}
	b[latBuckets-1] = math.Inf(1)
	return b
}()

type latHist [latBuckets]uint32

func (h *latHist) add(d time.Duration) {
	i := sort.SearchFloat64s(latBounds[:], float64(d))
	h[min(i, latBuckets-1)]++
}

// quantile in milliseconds: the upper bound of the bucket holding q
// (the last finite bound for the open one).
func (h *latHist) quantile(q float64, n int) float64 {
	want := uint32(math.Ceil(q * float64(n)))
	var c uint32
	for i, v := range h {
		c += v
		if c >= max(want, 1) {
			return latBounds[min(i, latBuckets-2)] / float64(time.Millisecond)
		}
	}
	return 0
}

// histogram adds events into a range's buckets: pure, so a test can feed
// it what it likes.
type histogram struct {
	q       HistoryQuery
	buckets []Bucket
	lat     []map[string]*latHist
	stages  map[string]bool
	types   map[string]bool
	events  int
}

func newHistogram(q HistoryQuery) *histogram {
	h := &histogram{q: q, buckets: make([]Bucket, q.buckets()), lat: make([]map[string]*latHist, q.buckets()),
		stages: map[string]bool{}, types: map[string]bool{}}
	for i := range h.buckets {
		h.buckets[i].Start = q.From.Add(time.Duration(i) * q.Step)
	}
	return h
}

// index is the bucket of stored time t, -1 outside the range.
func (h *histogram) index(t time.Time) int {
	if t.Before(h.q.From) || !t.Before(h.q.To) {
		return -1
	}
	return int(t.Sub(h.q.From) / h.q.Step)
}

// add counts one event of stage and type stored at t; took > 0 is its
// handling time.
func (h *histogram) add(t time.Time, stage, typ string, took time.Duration) {
	i := h.index(t)
	if i < 0 {
		return
	}
	if stage == "" {
		stage = "unknown"
	}
	b := &h.buckets[i]
	if b.Counts == nil {
		b.Counts = map[string]map[string]int{}
	}
	if b.Counts[stage] == nil {
		b.Counts[stage] = map[string]int{}
	}
	b.Counts[stage][typ]++
	b.Total++
	h.events++
	h.stages[stage], h.types[typ] = true, true
	if took > 0 {
		if h.lat[i] == nil {
			h.lat[i] = map[string]*latHist{}
		}
		l := h.lat[i][stage]
		if l == nil {
			l = &latHist{}
			h.lat[i][stage] = l
		}
		l.add(took)
		lt := b.Latency[stage]
		lt.N++
		if b.Latency == nil {
			b.Latency = map[string]Latency{}
		}
		b.Latency[stage] = lt
	}
}

// history is the result, the latencies' quantiles computed.
func (h *histogram) history() *History {
	out := &History{From: h.q.From, To: h.q.To, StepSec: int64(h.q.Step / time.Second), Buckets: h.buckets, Events: h.events,
		Stages: sortedKeys(h.stages), Types: sortedKeys(h.types), Marks: []Mark{}}
	for i := range out.Buckets {
		for st, l := range h.lat[i] {
			lt := out.Buckets[i].Latency[st]
			lt.P50Ms, lt.P99Ms = l.quantile(0.5, lt.N), l.quantile(0.99, lt.N)
			out.Buckets[i].Latency[st] = lt
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// HistoryLimits bound one read of the stream.
type HistoryLimits struct {
	MaxMessages int           // default DefaultHistoryMaxEvents
	MaxWait     time.Duration // default DefaultHistoryMaxWait
}

// ReadHistory reads the events stream's messages stored in q's range
// (an ordered consumer from q.From) and counts them per bucket, stage and
// event type, holding only the counts. It stops at q.To, at the end of
// the stream, or at a limit (then Truncated, ReadTo).
func ReadHistory(ctx context.Context, js jetstream.JetStream, q HistoryQuery, lim HistoryLimits) (*History, error) {
	if lim.MaxMessages <= 0 {
		lim.MaxMessages = DefaultHistoryMaxEvents
	}
	if lim.MaxWait <= 0 {
		lim.MaxWait = DefaultHistoryMaxWait
	}
	h := newHistogram(q)
	start := q.From
	cons, err := js.OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.PodPrefix + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		return nil, fmt.Errorf("read the events stream: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, lim.MaxWait)
	defer cancel()
	info, err := cons.Info(rctx)
	if err != nil {
		return nil, fmt.Errorf("read the events stream: %w", err)
	}
	var readTo time.Time
	messages, truncated := 0, false
	if info.NumPending > 0 {
		// A continuous pull keeps batches in flight while these are counted.
		it, err := cons.Messages(jetstream.PullMaxMessages(2000))
		if err != nil {
			return nil, fmt.Errorf("read the events stream: %w", err)
		}
		stop := context.AfterFunc(rctx, it.Stop) // the time limit ends a wait for the next message
		defer stop()
		defer it.Stop()
		for {
			if messages >= lim.MaxMessages {
				truncated = true
				break
			}
			m, err := it.Next()
			if err != nil {
				if rctx.Err() != nil && ctx.Err() == nil {
					truncated = true // the time limit
					break
				}
				return nil, fmt.Errorf("read the events stream: %w", err)
			}
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			messages++
			if !meta.Timestamp.Before(q.To) {
				break // the rest is later still
			}
			readTo = meta.Timestamp
			countMessage(h, meta.Timestamp, m.Data())
			if meta.NumPending == 0 {
				break // the end of the stream
			}
		}
	}
	out := h.history()
	out.Messages = messages
	if truncated {
		out.Truncated, out.ReadTo = true, readTo
	}
	return out, nil
}

// countMessage counts one message of the stream stored at t: a node's
// status report counts as the steps it carries, with the report's
// handling time once.
func countMessage(h *histogram, t time.Time, data []byte) {
	envs, err := bus.DecodeEvents(data)
	if err != nil {
		return
	}
	var took time.Duration
	if hs, he := envs[0].GetHandledStart(), envs[0].GetHandledEnd(); hs != nil && he != nil {
		took = he.AsTime().Sub(hs.AsTime())
	}
	if len(envs) > 1 {
		envs = envs[1:]
	}
	for i, env := range envs {
		if i > 0 {
			took = 0
		}
		h.add(t, env.GetStage(), string(env.Type()), took)
	}
}

// HistoryCache keeps the finished buckets of earlier reads, so that a
// timeline refreshed every few seconds reads only what the stream stored
// since: a bucket is finished once the read went past its end and the
// end is Settle in the past. It holds at most MaxHistoryBuckets*4 buckets
// of each of at most 8 steps. Read is safe for concurrent use; reads run
// one at a time.
type HistoryCache struct {
	// Settle is how long after a bucket's end events may still be stored
	// in it (default 2 s).
	Settle time.Duration

	mu    sync.Mutex
	steps map[time.Duration]*stepCache
}

type stepCache struct {
	buckets map[int64]Bucket // by start, Unix nanoseconds
	used    time.Time
}

const (
	cacheStepsMax   = 8
	cacheBucketsMax = 4 * MaxHistoryBuckets
)

// Read answers q from the cache and the stream after it.
func (c *HistoryCache) Read(ctx context.Context, js jetstream.JetStream, q HistoryQuery, lim HistoryLimits, now time.Time) (*History, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	settle := c.Settle
	if settle <= 0 {
		settle = 2 * time.Second
	}
	if c.steps == nil {
		c.steps = map[time.Duration]*stepCache{}
	}
	sc := c.steps[q.Step]
	if sc == nil {
		sc = &stepCache{buckets: map[int64]Bucket{}}
		c.steps[q.Step] = sc
		c.evictSteps()
	}
	sc.used = now
	// The buckets of the range the cache has, from the first on: the
	// stream is read from the first it lacks. Only whole buckets are
	// cached, so the range must start on a bucket boundary to use them.
	read := q
	var cached []Bucket
	if q.From.Equal(q.From.Truncate(q.Step)) {
		for t := q.From; t.Before(q.To); t = t.Add(q.Step) {
			b, ok := sc.buckets[t.UnixNano()]
			if !ok || t.Add(q.Step).After(q.To) {
				break
			}
			cached = append(cached, b)
			read.From = t.Add(q.Step)
		}
	}
	var h *History
	if read.From.Before(q.To) {
		var err error
		if h, err = ReadHistory(ctx, js, read, lim); err != nil {
			return nil, err
		}
	} else {
		h = &History{Marks: []Mark{}}
	}
	// Keep what is finished: read past, and settled.
	until := q.To
	if h.Truncated {
		until = h.ReadTo
	}
	if s := now.Add(-settle); s.Before(until) {
		until = s
	}
	for _, b := range h.Buckets {
		if !b.Start.Add(q.Step).After(until) {
			sc.buckets[b.Start.UnixNano()] = b
		}
	}
	if n := len(sc.buckets) - cacheBucketsMax; n > 0 {
		starts := make([]int64, 0, len(sc.buckets))
		for s := range sc.buckets {
			starts = append(starts, s)
		}
		sort.Slice(starts, func(a, b int) bool { return starts[a] < starts[b] })
		for _, s := range starts[:n] {
			delete(sc.buckets, s)
		}
	}
	// The answer: the cached buckets, then the ones read.
	h.From, h.To, h.StepSec = q.From, q.To, int64(q.Step/time.Second)
	h.Buckets = append(cached, h.Buckets...)
	stages, types := map[string]bool{}, map[string]bool{}
	h.Events = 0
	for _, b := range h.Buckets {
		h.Events += b.Total
		for st, ts := range b.Counts {
			stages[st] = true
			for t := range ts {
				types[t] = true
			}
		}
	}
	h.Stages, h.Types = sortedKeys(stages), sortedKeys(types)
	return h, nil
}

// evictSteps forgets the least recently used steps past cacheStepsMax.
func (c *HistoryCache) evictSteps() {
	for len(c.steps) > cacheStepsMax {
		var oldest time.Duration
		var at time.Time
		first := true
		for s, sc := range c.steps {
			if first || sc.used.Before(at) {
				oldest, at, first = s, sc.used, false
			}
		}
		delete(c.steps, oldest)
	}
}

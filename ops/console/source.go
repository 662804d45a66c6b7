package console

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/trace"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// Source is what the console reads: a whole snapshot, and one pod's
// journey.
type Source interface {
	Snapshot(ctx context.Context) *Snapshot
	Journey(ctx context.Context, ns, name string) (*Journey, error)
}

// Journey is one pod's waterfall: its timeline rebuilt from the stream and
// its Kubernetes events.
type Journey struct {
	*trace.Timeline
	Events []PodEvent `json:"events"`
}

// PodEvent is one Kubernetes event of the pod.
type PodEvent struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count"`
	Last    time.Time `json:"last"`
}

// BusSource reads a running system through a client session. Snapshot is
// called by one goroutine (the Hub's); Journey by any.
type BusSource struct {
	Sess *client.Session
	// MetricsFile is DATA/metrics.json (process → /metrics address); empty:
	// no handling-time percentiles.
	MetricsFile string
	// Window is how far back in the events stream the first poll reads.
	Window time.Duration

	// Journals are the journals the history's marks come from
	// (DATA/processes.log, DATA/faults.log); none: no marks.
	Journals []string
	// HistoryLimits bound one read of the stream's history.
	HistoryLimits HistoryLimits
	history       HistoryCache

	life     context.Context
	pods     *informer.Informer[*corev1.Pod]
	nodes    *informer.Informer[*corev1.Node]
	cons     jetstream.Consumer
	pings    pings
	seen     map[string]where
	prev     map[string]counters
	prevAt   time.Time
	answered map[string]bool // replicas that answered this poll's ping
	http     http.Client
	mu       sync.Mutex
	journeys map[string]cachedJourney
}

type counters struct{ delivered, handled int64 }

type cachedJourney struct {
	j  *Journey
	at time.Time
}

// Snapshot reads every source once.
func (s *BusSource) Snapshot(ctx context.Context) *Snapshot {
	now := time.Now()
	snap := &Snapshot{Time: now}
	fail := func(what string, err error) { snap.Errors = append(snap.Errors, what+": "+err.Error()) }
	if err := s.follow(ctx); err != nil {
		fail("events stream", err)
		s.cons = nil // start over next time (a restarted server, a deleted consumer)
	}
	stages, err := s.stages(ctx, now)
	if err != nil {
		fail("consumers", err)
	}
	snap.Stages = stages
	s.pings.add(now, s.answered)
	snap.Marks = s.pings.marks
	if err := s.informers(ctx); err != nil {
		fail("store", err)
		return snap
	}
	pods := s.pods.List("")
	snap.Pods = buildPods(pods, s.seen, now)
	snap.Nodes = buildNodes(s.nodes.List(""), pods, now)
	return snap
}

// Start gives the source the context its store informers run under (they
// start at the first snapshot, so a console nobody opens watches nothing).
func (s *BusSource) Start(ctx context.Context) { s.life = ctx }

// informers starts the pod and node informers once and waits for their
// first list: after it the store is read by watching changes, not by
// listing every pod every second.
func (s *BusSource) informers(ctx context.Context) error {
	if s.pods == nil {
		life := s.life
		if life == nil {
			life = context.Background()
		}
		pods, err := informer.New[*corev1.Pod](s.Sess.Store, "", informer.Handlers[*corev1.Pod]{})
		if err != nil {
			return err
		}
		nodes, err := informer.New[*corev1.Node](s.Sess.Store, "", informer.Handlers[*corev1.Node]{})
		if err != nil {
			return err
		}
		go pods.Run(life)
		go nodes.Run(life)
		s.pods, s.nodes = pods, nodes
	}
	if err := s.pods.WaitForSync(ctx); err != nil {
		return err
	}
	return s.nodes.WaitForSync(ctx)
}

// follow reads the events stream from where the last poll stopped and
// records where each pod is.
func (s *BusSource) follow(ctx context.Context) error {
	js := s.Sess.Bus.JetStream()
	if s.cons == nil {
		w := s.Window
		if w == 0 {
			w = 15 * time.Minute
		}
		start := time.Now().Add(-w)
		c, err := js.OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{bus.PodPrefix + ".>"},
			DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
			OptStartTime:   &start,
		})
		if err != nil {
			return err
		}
		s.cons, s.seen = c, map[string]where{}
	}
	for range 20 { // at most 20 000 events a poll; the rest next time
		batch, err := s.cons.FetchNoWait(1000)
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			envs, err := bus.DecodeEvents(m.Data())
			if err != nil {
				continue
			}
			for _, env := range envs {
				st, v := trace.Verdict(env)
				if st == "" {
					continue
				}
				key := env.GetNamespace() + "/" + env.GetPodName()
				if v == "deleted" {
					delete(s.seen, key)
					continue
				}
				s.seen[key] = where{Stage: st, Verdict: v, At: env.GetTime().AsTime()}
			}
		}
		if n < 1000 {
			return batch.Error()
		}
	}
	return nil
}

// stageConsumers are the pipeline's consumers in lifecycle order: the
// stages, then the node agents (one consumer each).
func stageConsumers(names []string) []string {
	out := append([]string{}, pipeline.Stages...)
	var agents []string
	for _, n := range names {
		if strings.HasPrefix(n, "nodeagent") {
			agents = append(agents, n)
		}
	}
	sort.Strings(agents)
	// The node agents come after the scheduler, where a pod goes next.
	at := len(out)
	for i, st := range out {
		if st == pipeline.Scheduler {
			at = i + 1
		}
	}
	return append(out[:at], append(agents, out[at:]...)...)
}

func (s *BusSource) stages(ctx context.Context, now time.Time) ([]Stage, error) {
	js := s.Sess.Bus.JetStream()
	infos := map[string]*jetstream.ConsumerInfo{}
	var names []string
	str, err := js.Stream(ctx, bus.EventsStream)
	if err != nil {
		return nil, err
	}
	for ci := range str.ListConsumers(ctx).Info() {
		if ci.Config.Durable == "" {
			continue
		}
		infos[ci.Name] = ci
		names = append(names, ci.Name)
	}
	dead := map[string]uint64{}
	if d, err := js.Stream(ctx, bus.DLQStream); err == nil {
		if info, err := d.Info(ctx, jetstream.WithSubjectFilter(bus.DLQPrefix+".>")); err == nil {
			for subj, n := range info.State.Subjects {
				dead[strings.TrimPrefix(subj, bus.DLQPrefix+".")] += n
			}
		}
	}
	pongs := Ping(ctx, s.Sess.Bus.NATS(), 300*time.Millisecond)
	s.answered = map[string]bool{}
	for _, p := range pongs {
		s.answered[p.Replica] = true
	}
	pct := s.percentiles(ctx)
	dt := now.Sub(s.prevAt).Seconds()
	cur := map[string]counters{}
	var out []Stage
	for _, name := range stageConsumers(names) {
		st := Stage{Name: displayName(name), Consumer: name, DeadLetters: dead[name]}
		if strings.HasPrefix(name, "nodeagent") {
			st.DeadLetters = dead["nodeagent"]
		}
		ci := infos[name]
		switch {
		case ci != nil:
			st.Pending, st.AckPending, st.Redelivered, st.Waiting = ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting
		case !pipeline.Controller(name): // a controller stage has no consumer
			st.Missing = true
		}
		for _, p := range pongs {
			if p.Stage == name || agentOf(p, name) {
				st.Peers = append(st.Peers, Peer{Name: p.Replica, Handled: p.Handled, Redelivered: p.Redelivered, DeadLettered: p.DeadLettered})
				st.Handled += p.Handled
			}
		}
		st.Replicas = len(st.Peers)
		st.Handling = min(st.Replicas, st.Waiting+st.AckPending)
		var c counters
		if ci != nil {
			c.delivered = int64(ci.Delivered.Consumer)
		}
		c.handled = st.Handled
		cur[name] = c
		if p, ok := s.prev[name]; ok && dt > 0 {
			st.InPerSec = math.Max(0, float64(c.delivered-p.delivered)/dt)
			st.OutPerSec = math.Max(0, float64(c.handled-p.handled)/dt)
		}
		if q, ok := pct[name]; ok {
			st.P50Millis, st.P99Millis = q[0], q[1]
		}
		st.BackingUp = st.Pending+uint64(st.AckPending) > BacklogLimit
		st.NoReplica = !st.Missing && (st.Replicas == 0 || (st.Waiting == 0 && st.AckPending == 0 && st.Pending > 0))
		out = append(out, st)
	}
	s.prev, s.prevAt = cur, now
	return out, nil
}

// displayName names a consumer for people: the stage, or the node agent
// and its node ("sim": every simulated node's).
func displayName(consumer string) string {
	if rest, ok := strings.CutPrefix(consumer, "nodeagent-sim-"); ok {
		if rest == "sim" {
			return "nodeagent (sim)"
		}
		return "nodeagent " + rest
	}
	if rest, ok := strings.CutPrefix(consumer, "nodeagent-"); ok {
		return "nodeagent " + rest
	}
	return consumer
}

// agentOf reports whether p is the node agent of consumer name.
func agentOf(p stage.Pong, name string) bool {
	r := bus.EncodeToken(p.Replica)
	return p.Stage == "nodeagent" && (name == "nodeagent-"+r || name == "nodeagent-sim-"+r || name == p.Replica)
}

// Ping gathers every stage replica's Pong for wait (client.Ping).
func Ping(ctx context.Context, nc *nats.Conn, wait time.Duration) []stage.Pong {
	return client.Ping(ctx, nc, wait)
}

// percentiles scrapes every stage replica's handling-time histogram and
// returns p50 and p99 in milliseconds per stage.
func (s *BusSource) percentiles(ctx context.Context) map[string][2]float64 {
	if s.MetricsFile == "" {
		return nil
	}
	b, err := os.ReadFile(s.MetricsFile)
	if err != nil {
		return nil
	}
	var addrs map[string]string
	if json.Unmarshal(b, &addrs) != nil {
		return nil
	}
	s.http.Timeout = 300 * time.Millisecond
	buckets := map[string]map[float64]float64{} // stage → le → cumulative count
	for _, addr := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := s.http.Do(req)
		if err != nil {
			continue
		}
		parseHistogram(bufio.NewScanner(resp.Body), "podflow_stage_handle_duration_seconds_bucket", buckets)
		resp.Body.Close()
	}
	out := map[string][2]float64{}
	for st, b := range buckets {
		out[st] = [2]float64{quantile(b, 0.5) * 1000, quantile(b, 0.99) * 1000}
	}
	return out
}

// parseHistogram adds the buckets of metric (labelled stage and le) from a
// Prometheus text exposition into into.
func parseHistogram(sc *bufio.Scanner, metric string, into map[string]map[float64]float64) {
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		labels, value, ok := strings.Cut(line[len(metric)+1:], "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		var st string
		le := math.NaN()
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			val = strings.Trim(val, `"`)
			switch k {
			case "stage":
				st = val
			case "le":
				if val == "+Inf" {
					le = math.Inf(1)
				} else if f, err := strconv.ParseFloat(val, 64); err == nil {
					le = f
				}
			}
		}
		if st == "" || math.IsNaN(le) {
			continue
		}
		if into[st] == nil {
			into[st] = map[float64]float64{}
		}
		into[st][le] += v
	}
}

// quantile is the upper bound of the bucket holding quantile q (the
// finite one below +Inf when q falls there), 0 without observations.
func quantile(b map[float64]float64, q float64) float64 {
	les := make([]float64, 0, len(b))
	for le := range b {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 || b[les[len(les)-1]] == 0 {
		return 0
	}
	total := b[les[len(les)-1]]
	for i, le := range les {
		if b[le] >= q*total {
			if math.IsInf(le, 1) && i > 0 {
				return les[i-1]
			}
			return le
		}
	}
	return les[len(les)-1]
}

// Journey rebuilds ns/name's timeline from the stream (cached a second).
func (s *BusSource) Journey(ctx context.Context, ns, name string) (*Journey, error) {
	key := ns + "/" + name
	s.mu.Lock()
	if c, ok := s.journeys[key]; ok && time.Since(c.at) < time.Second {
		s.mu.Unlock()
		return c.j, nil
	}
	s.mu.Unlock()
	recs, err := ReadPod(ctx, s.Sess.Bus.JetStream(), ns, name)
	if err != nil {
		return nil, err
	}
	j := &Journey{Timeline: trace.Build(ns, name, recs, nil), Events: []PodEvent{}}
	j.Entries = trace.Fold(j.Entries) // one row per step, a count per retry
	if evs, _, err := objects.List[*corev1.Event](ctx, s.Sess.Store, ns); err == nil {
		for _, e := range evs {
			io := e.GetInvolvedObject()
			if io.GetKind() != "Pod" || io.GetName() != name || (j.UID != "" && io.GetUid() != "" && io.GetUid() != j.UID) {
				continue
			}
			last := e.GetLastTimestamp()
			if last == nil {
				last = e.GetEventTime()
			}
			j.Events = append(j.Events, PodEvent{Type: e.GetType(), Reason: e.GetReason(), Message: e.GetMessage(), Count: e.GetCount(), Last: last.AsTime()})
		}
		sort.Slice(j.Events, func(a, b int) bool { return j.Events[a].Last.Before(j.Events[b].Last) })
	}
	s.mu.Lock()
	if s.journeys == nil || len(s.journeys) > 1000 {
		s.journeys = map[string]cachedJourney{}
	}
	s.journeys[key] = cachedJourney{j, time.Now()}
	s.mu.Unlock()
	return j, nil
}

// ReadPod reads every event of ns/name from the events stream.
func ReadPod(ctx context.Context, js jetstream.JetStream, ns, name string) ([]trace.Record, error) {
	cons, err := js.OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.PodFilter(ns, name)},
	})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	var recs []trace.Record
	for pending := int(info.NumPending); pending > 0; {
		batch, err := cons.Fetch(min(pending, 500), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return recs, err
		}
		got, n, _ := trace.Records(batch) // a batch that ended early is read again below
		recs = append(recs, got...)
		if n == 0 {
			break
		}
		pending -= n
	}
	return recs, nil
}

// History reads the events stream over q's range and marks what the
// journals recorded in it.
func (s *BusSource) History(ctx context.Context, q HistoryQuery) (*History, error) {
	h, err := s.history.Read(ctx, s.Sess.Bus.JetStream(), q, s.HistoryLimits, time.Now())
	if err != nil {
		return nil, err
	}
	for _, path := range s.Journals {
		hs, err := plan.ReadJournal(path, q.From, q.To)
		if err != nil {
			h.Errors = append(h.Errors, "marks: "+err.Error())
		}
		for _, x := range hs {
			if x.Kind != plan.HappeningStarted {
				h.Marks = append(h.Marks, Mark{Time: x.Time, Kind: x.Kind, Process: x.Process, Detail: x.Detail})
			}
		}
	}
	sort.SliceStable(h.Marks, func(a, b int) bool { return h.Marks[a].Time.Before(h.Marks[b].Time) })
	return h, nil
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/up"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// PipelineOptions configure RunPipeline (`podflow bench pipeline`).
type PipelineOptions struct {
	Config   string // the system's client configuration ("": the configured one, else its own)
	Own      bool   // start a system of its own even when one is configured
	Pods     int    // pods to request in all
	Rate     int    // PodRequested events per second
	Nodes    int    // simulated nodes of its own system
	Replicas string // stage replicas of its own system, "admission=2"
	Keep     bool   // keep its own system's data directory
	CostJSON string // also write the cost table as JSON here
	Profiles string // every process of its own system writes a CPU profile here
	// HeapProfiles: every process of its own system writes heap profiles here.
	HeapProfiles string
	// Webhooks registers a local mutating and a local validating
	// admission webhook for every pod before the run.
	Webhooks bool
	// SLO adds a pass after the pipeline's: SLOPods pods created with
	// client-go through the HTTPS API at SLORate per second (0: 80% of
	// the pipeline pass's pods/s), measured as Kubernetes' SLOs measure
	// them (slo.go); SLOJSON also writes the figures as JSON.
	SLO     bool
	SLOPods int
	SLORate int
	SLOJSON string
	// NoTokenVolume sets the pods' automountServiceAccountToken to false:
	// no projected ServiceAccount token volume (the kube-root-ca.crt
	// ConfigMap and a bound token per pod). The default keeps Kubernetes'
	// automount, as most pods do.
	NoTokenVolume bool
}

func RunPipeline(ctx context.Context, o *PipelineOptions, out io.Writer) error {
	if o.Pods < 1 || o.Rate < 1 {
		return fmt.Errorf("--pods and --rate must be positive")
	}
	if o.SLOPods < 0 || o.SLORate < 0 {
		return fmt.Errorf("--slo-pods and --slo-rate must not be negative")
	}
	if !o.SLO && (o.SLOPods > 0 || o.SLORate > 0 || o.SLOJSON != "") {
		return fmt.Errorf("--slo-pods, --slo-rate and --slo-json need --slo")
	}
	for _, p := range []struct{ flag, dir, env string }{
		{"--profile-dir", o.Profiles, ProfileDirEnv},
		{"--heap-profile-dir", o.HeapProfiles, HeapProfileDirEnv},
	} {
		if p.dir == "" {
			continue
		}
		if o.Config != "" {
			return fmt.Errorf("%s profiles the system bench starts itself, not one given by --config", p.flag)
		}
		o.Own = true // the system it starts itself
		dir, err := filepath.Abs(p.dir)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// up.SystemUnderTest's `podflow up` and every child it starts inherit it.
		os.Setenv(p.env, dir)
		defer os.Unsetenv(p.env)
	}
	sess, ps, cleanup, err := up.SystemUnderTest(ctx, up.SystemOptions{Config: o.Config, Own: o.Own, Out: out, Nodes: o.Nodes, Replicas: o.Replicas, Keep: o.Keep, Name: "podflow-bench"})
	if err != nil {
		return err
	}
	defer cleanup()
	before, err := takeCostSample(ctx, sess, ps)
	if err != nil {
		return fmt.Errorf("cost sample: %w", err)
	}

	if o.Webhooks {
		hooks, err := startBenchHooks(ctx, sess)
		if err != nil {
			return err
		}
		defer func() {
			fmt.Fprintf(out, "bench pipeline: the webhooks answered %d calls over %d connections\n", hooks.calls.Load(), hooks.conns.Load())
			if err := hooks.close(); err != nil {
				fmt.Fprintf(out, "bench pipeline: %v\n", err)
			}
		}()
		fmt.Fprintf(out, "bench pipeline: with a mutating and a validating admission webhook (%s)\n", hooks.srv.URL)
	}
	prefix := fmt.Sprintf("bench-%d-", time.Now().UnixNano()%1_000_000)
	tokens := "with"
	if o.NoTokenVolume {
		tokens = "without"
	}
	fmt.Fprintf(out, "bench pipeline: %d pods at %d/s offered, %s a ServiceAccount token volume\n", o.Pods, o.Rate, tokens)
	start, offered, err := offerPods(ctx, sess, prefix, o.Pods, o.Rate, !o.NoTokenVolume)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "bench pipeline: %d pods offered in %s; waiting for them to run\n", o.Pods, offered.Round(time.Millisecond))

	// Wait until every pod ran, from its PodRunning alone (a step of the
	// node's PodStatusReport: the bench reads only the reports, one
	// consumer for the whole wait): the cost counted below is the system's,
	// not that of the bench watching it. The timelines are read after the
	// cost sample.
	deadline := time.Now().Add(time.Duration(o.Pods/10+60) * time.Second)
	if _, err := waitRunning(ctx, sess, start, prefix, o.Pods, deadline, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "bench pipeline: all %d pods Running after %s; waiting for the consumers to drain\n", o.Pods, time.Since(start).Round(time.Millisecond))
	quiesced := quiesce(ctx, sess, 30*time.Second)
	after, err := takeCostSample(ctx, sess, ps)
	if err != nil {
		return fmt.Errorf("cost sample: %w", err)
	}

	fmt.Fprintf(out, "bench pipeline: reading the %d pods' timelines from the stream\n", o.Pods)
	runs, err := readTimelines(ctx, sess, start, prefix, o.Pods, time.Now().Add(time.Duration(o.Pods/100+60)*time.Second))
	if err != nil {
		return err
	}
	podsPerSec := report(out, runs, start, offered)
	minEvents := 0
	for _, tl := range runs {
		if n := len(tl.messages); minEvents == 0 || n < minEvents {
			minEvents = n
		}
	}
	cost := after.since(before, o.Pods, minEvents, quiesced)
	cost.print(out)
	if o.CostJSON != "" {
		if err := cost.writeJSON(o.CostJSON); err != nil {
			return err
		}
	}
	if o.SLO {
		return runSLOPass(ctx, sess, o, podsPerSec, out)
	}
	return nil
}

// runSLOPass is --slo: the SLO pass at o.SLORate, else at 80% of the
// pipeline pass's pods/s, printed after the pipeline's figures.
func runSLOPass(ctx context.Context, sess *client.Session, o *PipelineOptions, podsPerSec float64, out io.Writer) error {
	n, rate := o.SLOPods, o.SLORate
	if n == 0 {
		n = o.Pods
	}
	if rate == 0 {
		rate = max(int(0.8*podsPerSec), 1)
	}
	res, err := runSLO(ctx, sess, n, rate, time.Now().Add(time.Duration(n/rate+n/10+60)*time.Second), out)
	if err != nil {
		return err
	}
	if o.SLORate == 0 {
		res.Saturated = podsPerSec
	}
	res.print(out)
	if o.SLOJSON != "" {
		return res.writeJSON(o.SLOJSON)
	}
	return nil
}

// offerPods publishes n PodRequested events for pods named prefix0,
// prefix1, ... at rate per second and waits for the stream to store them
// all; it returns when the first was offered and how long offering took.
// Without tokenVolume the pods' automountServiceAccountToken is false.
func offerPods(ctx context.Context, sess *client.Session, prefix string, n, rate int, tokenVolume bool) (start time.Time, offered time.Duration, err error) {
	template := benchPod(tokenVolume)
	token, err := sess.Config.BusToken(sess.Config.Token) // never in clear on the stream
	if err != nil {
		return start, 0, err
	}
	start = time.Now()
	interval := time.Second / time.Duration(rate)
	futures := make([]*bus.PubFuture, 0, n)
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return start, 0, ctx.Err()
			}
		}
		p := proto.CloneOf(template)
		p.Metadata.Name = fmt.Sprintf("%s%d", prefix, i)
		f, err := sess.Bus.PublishAsync(client.PodRequested(p, token))
		if err != nil {
			return start, 0, err
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			return start, 0, err
		}
	}
	return start, time.Since(start), nil
}

// benchPod is the pod the bench offers, but for its name; without
// tokenVolume its automountServiceAccountToken is false.
func benchPod(tokenVolume bool) *corev1.Pod {
	p := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: "default", Labels: map[string]string{"app": "bench"}},
		Spec:     &corev1.PodSpec{Containers: []*corev1.Container{{Name: "app", Image: "podflow/http:1"}}},
	}
	if !tokenVolume {
		p.Spec.AutomountServiceAccountToken = proto.Bool(false)
	}
	return p
}

// waitRunning returns once n pods named prefix* have a PodRunning on the
// stream since start (a message of its own or a step of a report), with
// the latest time a pod of them reached Running (the PodRunning's own).
func waitRunning(ctx context.Context, sess *client.Session, start time.Time, prefix string, n int, deadline time.Time, progress io.Writer) (time.Time, error) {
	cons, err := sess.Bus.JetStream().OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.TypeFilter("PodStatusReport"), bus.TypeFilter("PodRunning")},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	var last time.Time
	if err != nil {
		return last, err
	}
	it, err := cons.Messages()
	if err != nil {
		return last, err
	}
	defer it.Stop()
	running := map[string]bool{}
	said := time.Now()
	for len(running) < n && time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return last, err // interrupted: the bench stops now, not at the deadline
		}
		if progress != nil && time.Since(said) >= 5*time.Second {
			said = time.Now()
			fmt.Fprintf(progress, "bench pipeline: %d/%d pods Running after %s\n", len(running), n, time.Since(start).Round(time.Second))
		}
		m, err := it.Next(jetstream.NextMaxWait(2 * time.Second))
		switch {
		case errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded):
			continue
		case err != nil:
			return last, err
		}
		envs, err := bus.DecodeEvents(m.Data())
		if err != nil || !strings.HasPrefix(envs[0].GetPodName(), prefix) {
			continue
		}
		for _, env := range envs {
			if env.GetPodRunning() != nil && !running[env.GetPodName()] {
				running[env.GetPodName()] = true
				if t := env.GetTime().AsTime(); t.After(last) {
					last = t
				}
			}
		}
	}
	if len(running) < n {
		return last, fmt.Errorf("only %d of %d pods reached Running before the deadline", len(running), n)
	}
	return last, nil
}

// readTimelines reads the events of the pods named prefix* since start
// until n of them have reached Running.
func readTimelines(ctx context.Context, sess *client.Session, start time.Time, prefix string, n int, deadline time.Time) (map[string]*podTimeline, error) {
	runs := map[string]*podTimeline{}
	cons, err := sess.Bus.JetStream().OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.PodPrefix + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		return nil, err
	}
	// One iterator for the whole read: an ordered consumer's Fetch
	// creates a consumer on the server per batch (a NATS profile of the
	// bench showed those creates as 12% of the server's CPU).
	it, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	running := 0
	for running < n && time.Now().Before(deadline) {
		m, err := it.Next(jetstream.NextMaxWait(2 * time.Second))
		switch {
		case errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded):
			continue
		case err != nil:
			return nil, err
		}
		envs, err := bus.DecodeEvents(m.Data())
		if err != nil || !strings.HasPrefix(envs[0].GetPodName(), prefix) {
			continue
		}
		meta, _ := m.Metadata()
		tl := runs[envs[0].GetPodName()]
		if tl == nil {
			tl = &podTimeline{messages: map[string]bool{}}
			runs[envs[0].GetPodName()] = tl
		}
		tl.messages[string(envs[0].Type())] = true
		for _, env := range envs { // a report and its steps
			if tl.add(env, meta.Timestamp) {
				running++
			}
		}
	}
	if running < n {
		return nil, fmt.Errorf("only %d of %d pods reached Running before the deadline", running, n)
	}
	return runs, nil
}

// podTimeline is one pod's events, by type, with stream timestamps.
type podTimeline struct {
	messages map[string]bool // types of the messages stored (a report's steps not counted)
	events   map[string]*eventsv1.Envelope
	stored   map[string]time.Time // event id -> time the stream stored it
	running  time.Time
}

// add records env; it reports true when the pod just reached Running.
func (tl *podTimeline) add(env *eventsv1.Envelope, stored time.Time) bool {
	if tl.events == nil {
		tl.events, tl.stored = map[string]*eventsv1.Envelope{}, map[string]time.Time{}
	}
	t := string(env.Type())
	if _, dup := tl.events[t]; !dup {
		tl.events[t] = env
	}
	tl.stored[env.GetId()] = stored
	if t == "PodRunning" && tl.running.IsZero() {
		tl.running = env.GetTime().AsTime()
		return true
	}
	return false
}

// stageSample is what one stage spent on one pod: the wait of its input in
// the stream and its handling time.
func (tl *podTimeline) stageSample(outType string) (wait, handle time.Duration, ok bool) {
	e := tl.events[outType]
	if e == nil || e.GetHandledStart() == nil || e.GetHandledEnd() == nil {
		return 0, 0, false
	}
	in, ok := tl.stored[e.GetCausedBy()]
	if !ok {
		return 0, 0, false
	}
	return e.GetHandledStart().AsTime().Sub(in), e.GetHandledEnd().AsTime().Sub(e.GetHandledStart().AsTime()), true
}

// report prints the pipeline pass's figures and returns its pods/s.
func report(out io.Writer, runs map[string]*podTimeline, start time.Time, offered time.Duration) float64 {
	var lat []time.Duration
	var last time.Time
	for _, tl := range runs {
		req := tl.events["PodRequested"]
		if req == nil || tl.running.IsZero() {
			continue
		}
		lat = append(lat, tl.running.Sub(req.GetTime().AsTime()))
		if tl.running.After(last) {
			last = tl.running
		}
	}
	elapsed := last.Sub(start)
	fmt.Fprintf(out, "offered for %s; the last pod was Running %s after the first request\n", offered.Round(time.Millisecond), elapsed.Round(time.Millisecond))
	podsPerSec := float64(len(lat)) / elapsed.Seconds()
	fmt.Fprintf(out, "%.0f pods/s\n", podsPerSec)
	fmt.Fprintf(out, "PodRequested→Running: p50 %s  p99 %s  max %s  (n=%d)\n", pct(lat, 50), pct(lat, 99), pct(lat, 100), len(lat))
	fmt.Fprintf(out, "%-12s %-16s %12s %12s %12s %12s\n", "stage", "output", "wait p50", "wait p99", "handle p50", "handle p99")
	for _, s := range []struct{ stage, out string }{
		{"api", "PodAuthorized"}, {"admission", "PodAdmitted"}, {"persistence", "PodPersisted"}, {"scheduler", "PodScheduled"},
	} {
		var waits, handles []time.Duration
		for _, tl := range runs {
			if w, h, ok := tl.stageSample(s.out); ok {
				waits, handles = append(waits, w), append(handles, h)
			}
		}
		fmt.Fprintf(out, "%-12s %-16s %12s %12s %12s %12s\n", s.stage, s.out, pct(waits, 50), pct(waits, 99), pct(handles, 50), pct(handles, 99))
	}
	var node []time.Duration
	for _, tl := range runs {
		if sch := tl.events["PodScheduled"]; sch != nil && !tl.running.IsZero() {
			node = append(node, tl.running.Sub(sch.GetTime().AsTime()))
		}
	}
	fmt.Fprintf(out, "%-12s %-16s %12s %12s   (PodScheduled→PodRunning)\n", "nodeagent", "PodRunning", pct(node, 50), pct(node, 99))
	return podsPerSec
}

func pct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := (len(ds)*p + 99) / 100
	i = min(max(i-1, 0), len(ds)-1)
	return ds[i].Round(10 * time.Microsecond).String()
}

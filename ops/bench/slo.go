package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
)

// Kubernetes' scalability SLOs (sig-scalability's slos.md) as a client
// sees them, measured by `podflow bench pipeline --slo`:
//
//   - Mutating API call latency: the 99th percentile of the latency of
//     single-object mutating calls, per (resource, verb), ≤ 1 s.
//   - Pod startup latency: the 99th percentile of the time from a
//     stateless pod's creation until it is observed Running by a watch,
//     ≤ 5 s (clusterloader2's PodStartupLatency, "pod_startup").
const (
	sloMutatingP99 = time.Second
	sloStartupP99  = 5 * time.Second
)

// sloInFlight bounds the calls in flight of the SLO pass: past it the
// offered rate drops, which the pass reports.
const sloInFlight = 512

// latencies is a sample of durations, safe for concurrent use, with
// clusterloader2's percentiles (measurementutil.NewLatencyMetric: the
// ⌈n·p/100⌉-th smallest).
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// latencySummary is a sample's percentiles, in milliseconds for the JSON.
type latencySummary struct {
	N     int     `json:"n"`
	P50ms float64 `json:"p50Ms"`
	P90ms float64 `json:"p90Ms"`
	P99ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
	// Errors are the calls that failed (not in the sample).
	Errors int `json:"errors,omitempty"`
	// Missing are the pods created but not seen Running (startup only).
	Missing int `json:"missing,omitempty"`
}

func (s latencySummary) p50() time.Duration { return msDuration(s.P50ms) }
func (s latencySummary) p99() time.Duration { return msDuration(s.P99ms) }
func (s latencySummary) max() time.Duration { return msDuration(s.MaxMs) }

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// summary returns the sample's p50, p90, p99 and maximum.
func (l *latencies) summary() latencySummary {
	l.mu.Lock()
	d := slices.Clone(l.d)
	l.mu.Unlock()
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x) / float64(time.Millisecond) }
	s := latencySummary{N: len(d)}
	if len(d) > 0 {
		s.P50ms, s.P90ms, s.P99ms, s.MaxMs = ms(quantile(d, 50)), ms(quantile(d, 90)), ms(quantile(d, 99)), ms(d[len(d)-1])
	}
	return s
}

// quantile is the ⌈n·p/100⌉-th smallest of sorted (clusterloader2's rule);
// zero for an empty sample.
func quantile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(sorted)*p)/100)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// startups is the pod startup bookkeeping: when each pod's create was
// sent, and when a watch first saw it Running.
type startups struct {
	mu      sync.Mutex
	created map[string]time.Time
	running map[string]time.Time
}

func newStartups() *startups {
	return &startups{created: map[string]time.Time{}, running: map[string]time.Time{}}
}

// sent records that the create of pod name was sent at t.
func (s *startups) sent(name string, t time.Time) {
	s.mu.Lock()
	s.created[name] = t
	s.mu.Unlock()
}

// failed forgets a pod whose create failed.
func (s *startups) failed(name string) {
	s.mu.Lock()
	delete(s.created, name)
	delete(s.running, name)
	s.mu.Unlock()
}

// observed records a watch's sight of pod name in phase at t: the first
// Running counts, later ones and other phases do not.
func (s *startups) observed(name string, phase corev1.PodPhase, t time.Time) {
	if phase != corev1.PodRunning {
		return
	}
	s.mu.Lock()
	if _, seen := s.running[name]; !seen {
		s.running[name] = t
	}
	s.mu.Unlock()
}

// runningOf returns how many of the created pods were seen Running.
func (s *startups) runningOf() (running, created int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.created {
		if _, ok := s.running[name]; ok {
			running++
		}
	}
	return running, len(s.created)
}

// summary returns the startup latencies of the pods seen Running; the
// created pods never seen Running are Missing.
func (s *startups) summary() latencySummary {
	var l latencies
	missing := 0
	s.mu.Lock()
	for name, c := range s.created {
		r, ok := s.running[name]
		if !ok {
			missing++
			continue
		}
		l.d = append(l.d, r.Sub(c))
	}
	s.mu.Unlock()
	sum := l.summary()
	sum.Missing = missing
	return sum
}

// sloResult is what the SLO pass measured (--slo-json).
type sloResult struct {
	Pods int `json:"pods"`
	// Rate is the creates per second asked for; Offered what the pass
	// achieved (lower when sloInFlight calls were outstanding).
	Rate    int     `json:"rate"`
	Offered float64 `json:"offered"`
	// Saturated is the pipeline pass's pods/s the rate was derived from
	// (0 when --slo-rate was given).
	Saturated float64        `json:"saturated,omitempty"`
	Create    latencySummary `json:"create"`
	Delete    latencySummary `json:"delete"`
	Startup   latencySummary `json:"startup"`
}

// runSLO creates n pods through the system's Kubernetes API with stock
// client-go at rate per second, watches them with an informer until all
// are Running (or deadline), then deletes them at the same rate.
func runSLO(ctx context.Context, sess *client.Session, n, rate int, deadline time.Time, out io.Writer) (*sloResult, error) {
	if sess.Config.DataDir == "" {
		return nil, errors.New("--slo: the client configuration names no data directory, so no kubeconfig: run it on a system `podflow up` started")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", plan.Layout{Dir: sess.Config.DataDir}.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("--slo: the admin's kubeconfig: %w", err)
	}
	// The pass sets the rate itself; client-go's limiter (5/s by default)
	// must not.
	cfg.QPS, cfg.Burst = float32(4*rate+100), 4*rate+100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	const ns = "default"
	run := rand.String(6)
	selector := "podflow-bench-slo=" + run
	st := newStartups()
	seen := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			st.observed(p.Name, p.Status.Phase, time.Now())
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		factory.Shutdown() // waits for the informer's goroutines
	}()
	factory.Start(wctx.Done())
	if !cache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("--slo: the pod informer did not sync: %w", ctx.Err())
	}

	res := &sloResult{Pods: n, Rate: rate}
	var create, del latencies
	var mu sync.Mutex
	var made []string // the pods created, deleted at the end
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("slo-%s-%d", run, i)
	}
	fmt.Fprintf(out, "bench slo: creating %d pods through HTTPS with client-go at %d/s\n", n, rate)
	errs, offered := paced(ctx, names, rate, func(ctx context.Context, name string) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "bench", "podflow-bench-slo": run}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "podflow/http:1"}}},
		}
		t := time.Now()
		st.sent(name, t)
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			st.failed(name)
			return err
		}
		create.add(time.Since(t))
		mu.Lock()
		made = append(made, name)
		mu.Unlock()
		return nil
	})
	res.Offered = float64(n) / offered.Seconds()
	if errs.n == n {
		return nil, fmt.Errorf("--slo: every create failed, the first: %v", errs.first)
	}
	said := time.Now()
	for {
		running, created := st.runningOf()
		if running == created || time.Now().After(deadline) {
			break
		}
		if time.Since(said) >= 5*time.Second {
			said = time.Now()
			fmt.Fprintf(out, "bench slo: %d/%d pods Running\n", running, created)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res.Create, res.Startup = create.summary(), st.summary()
	res.Create.Errors = errs.n
	if errs.n > 0 {
		fmt.Fprintf(out, "bench slo: %d creates failed, the first: %v\n", errs.n, errs.first)
	}

	fmt.Fprintf(out, "bench slo: deleting the %d pods at %d/s\n", len(made), rate)
	derrs, _ := paced(ctx, made, rate, func(ctx context.Context, name string) error {
		t := time.Now()
		if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		del.add(time.Since(t))
		return nil
	})
	res.Delete = del.summary()
	res.Delete.Errors = derrs.n
	if derrs.n > 0 {
		fmt.Fprintf(out, "bench slo: %d deletes failed, the first: %v\n", derrs.n, derrs.first)
	}
	return res, ctx.Err()
}

// callErrors counts the failed calls of a paced run.
type callErrors struct {
	mu    sync.Mutex
	n     int
	first error
}

// paced calls call for each name, the i-th started at i/rate seconds
// after the first, at most sloInFlight at once; it returns when all have
// returned, with the failures and how long starting them all took.
func paced(ctx context.Context, names []string, rate int, call func(context.Context, string) error) (*callErrors, time.Duration) {
	errs := &callErrors{}
	sem := make(chan struct{}, sloInFlight)
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for i, name := range names {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := call(ctx, name); err != nil {
				errs.mu.Lock()
				if errs.n++; errs.first == nil {
					errs.first = err
				}
				errs.mu.Unlock()
			}
		})
	}
	offered := time.Since(start)
	wg.Wait()
	return errs, max(offered, interval)
}

// print writes the SLO table: each figure beside its SLO.
func (r *sloResult) print(out io.Writer) {
	from := "given by --slo-rate"
	if r.Saturated > 0 {
		from = fmt.Sprintf("80%% of the %.0f pods/s above", r.Saturated)
	}
	fmt.Fprintf(out, "Kubernetes' SLOs from a client (client-go over HTTPS): %d pods created at %d/s (%s; %.0f/s achieved)\n", r.Pods, r.Rate, from, r.Offered)
	fmt.Fprintf(out, "%-44s %10s %10s %10s %6s %7s  %s\n", "", "p50", "p99", "max", "n", "errors", "SLO (p99)")
	row := func(what string, s latencySummary, slo time.Duration, bad int) {
		verdict := "met"
		if s.N == 0 || s.p99() > slo || bad > 0 {
			verdict = "NOT met"
		}
		fmt.Fprintf(out, "%-44s %10s %10s %10s %6d %7d  ≤ %s %s\n", what, roundLat(s.p50()), roundLat(s.p99()), roundLat(s.max()), s.N, bad, slo, verdict)
	}
	row("mutating API call: POST pods (create)", r.Create, sloMutatingP99, r.Create.Errors)
	row("mutating API call: DELETE pods", r.Delete, sloMutatingP99, r.Delete.Errors)
	row("pod startup: created → Running (watched)", r.Startup, sloStartupP99, r.Startup.Missing)
}

func roundLat(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }

func (r *sloResult) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

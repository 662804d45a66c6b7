package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/up"
	"github.com/podflow/podflow/services/pipeline"
)

// ScaleOptions configure RunScale (`podflow bench scale`).
type ScaleOptions struct {
	Stage      string        // the stage to scale
	Replicas   string        // replica counts to compare, "1,2"
	StageCPU   float64       // CPUs each replica of the stage may use
	Pods       int           // pods per run
	Rate       int           // PodRequested events per second
	Nodes      int           // simulated nodes
	Runs       int           // runs of each replica count (alternating)
	JSONOut    string        // also write every run as JSON here
	Keep       bool          // keep each run's data directory
	CgroupRoot string        // where the cgroup hierarchies are mounted
	Sample     time.Duration // how often the consumers are sampled

	counts []int // parsed from Replicas
}

// Parse validates the options and parses --replicas.
func (o *ScaleOptions) Parse() error {
	if !pipeline.Known(o.Stage) {
		return fmt.Errorf("--stage %q: stages are %s", o.Stage, strings.Join(pipeline.Stages, ", "))
	}
	counts, err := parseReplicaCounts(o.Replicas)
	if err != nil {
		return err
	}
	o.counts = counts
	switch {
	case !(o.StageCPU > 0) || o.StageCPU > float64(runtime.NumCPU()):
		return fmt.Errorf("--stage-cpu %v: want more than 0 and at most the %d CPUs of this machine", o.StageCPU, runtime.NumCPU())
	case quotaUs(o.StageCPU) < minQuotaUs:
		return fmt.Errorf("--stage-cpu %v: below the kernel's smallest CPU quota (%d µs per %d µs, %.2f CPUs)", o.StageCPU, minQuotaUs, cpuPeriodUs, float64(minQuotaUs)/cpuPeriodUs)
	case o.Pods < 1 || o.Rate < 1 || o.Nodes < 1 || o.Runs < 1:
		return fmt.Errorf("--pods, --rate, --nodes and --runs must be positive")
	case o.Sample <= 0:
		return fmt.Errorf("--sample must be positive")
	}
	return nil
}

// parseReplicaCounts parses "1,2,4": distinct counts from 1 to
// plan.MaxReplicas, in the order given.
func parseReplicaCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > plan.MaxReplicas {
			return nil, fmt.Errorf("--replicas %q: %q is not a replica count (1..%d)", s, f, plan.MaxReplicas)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("--replicas %q: %d given twice", s, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// ScaleRun is one run of `podflow bench scale`.
type ScaleRun struct {
	Replicas   int     `json:"replicas"`
	Run        int     `json:"run"`  // 1-based round
	Load1      float64 `json:"load"` // the 1-minute load average when the run began
	PodsPerSec float64 `json:"podsPerSec"`
	// StageCPUms is the CPU time of every replica of the stage over the
	// run; TotalCPUms that of every process of the system.
	StageCPUms float64 `json:"stageCpuMs"`
	TotalCPUms float64 `json:"totalCpuMs"`
	Pods       int     `json:"pods"`
	// Throttled is the share of the CFS periods in which a bound stopped a
	// replica (summed over the replicas).
	Throttled float64 `json:"throttled"`
	// Stage is the stage's durable consumer, sampled during the run.
	Stage ConsumerLoad `json:"stage"`
	// Consumers is every durable consumer of the events stream.
	Consumers map[string]ConsumerLoad `json:"consumers"`
	Bounds    []cpuBound              `json:"bounds"` // each replica's cgroup, read back once it was placed
	// Restarted names replicas whose process changed during the run (the
	// new process ran unbounded).
	Restarted []string `json:"restarted,omitempty"`
}

// ConsumerLoad is a durable consumer's backlog over the samples of a run.
type ConsumerLoad struct {
	PendingP50    uint64 `json:"pendingP50"`
	PendingMax    uint64 `json:"pendingMax"`
	AckPendingP50 uint64 `json:"ackPendingP50"`
	AckPendingMax uint64 `json:"ackPendingMax"`
	MaxAckPending int    `json:"maxAckPending"` // the consumer's bound
	Samples       int    `json:"samples"`
}

// StageMsPerPod is the stage's CPU ms per pod.
func (r ScaleRun) StageMsPerPod() float64 { return r.StageCPUms / float64(max(r.Pods, 1)) }

// TotalMsPerPod is the system's CPU ms per pod.
func (r ScaleRun) TotalMsPerPod() float64 { return r.TotalCPUms / float64(max(r.Pods, 1)) }

// ScaleReport is every run of one `podflow bench scale`.
type ScaleReport struct {
	Stage    string     `json:"stage"`
	StageCPU float64    `json:"stageCpu"`
	Cgroup   string     `json:"cgroup"` // "v1" or "v2"
	Pods     int        `json:"pods"`
	Rate     int        `json:"rate"`
	Nodes    int        `json:"nodes"`
	Runs     []ScaleRun `json:"runs"`
}

func RunScale(ctx context.Context, o *ScaleOptions, out io.Writer) error {
	groups, err := newCPUGroups(o.CgroupRoot)
	if errors.Is(err, ErrNoCPUCgroup) {
		fmt.Fprintf(out, "bench scale: skipped: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer groups.Close()
	rep := &ScaleReport{Stage: o.Stage, StageCPU: o.StageCPU, Cgroup: groups.Mode(), Pods: o.Pods, Rate: o.Rate, Nodes: o.Nodes}
	fmt.Fprintf(out, "bench scale: stage %s, %.3g CPU per replica (cgroup %s, %s), %d pods at %d/s offered, %d simulated nodes, %d runs of each of %v, alternating\n",
		o.Stage, o.StageCPU, groups.Mode(), groups.Root(), o.Pods, o.Rate, o.Nodes, o.Runs, o.counts)
	for round := 1; round <= o.Runs; round++ {
		for _, n := range o.counts {
			r, err := runScaleOnce(ctx, o, groups, n, round, out)
			if err != nil {
				return fmt.Errorf("%d replicas, run %d: %w", n, round, err)
			}
			rep.Runs = append(rep.Runs, r)
			fmt.Fprintf(out, "  %d replicas, run %d: %.0f pods/s\n", n, round, r.PodsPerSec)
		}
	}
	rep.print(out)
	if o.JSONOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(o.JSONOut, b, 0o644)
	}
	return nil
}

// runScaleOnce starts a system with n replicas of the stage, bounds each
// in a cgroup, offers the load and stops the system (and removes the
// cgroups) again.
func runScaleOnce(ctx context.Context, o *ScaleOptions, groups *cpuGroups, n, round int, out io.Writer) (r ScaleRun, err error) {
	r = ScaleRun{Replicas: n, Run: round, Pods: o.Pods, Load1: load1()}
	sess, ps, cleanup, err := up.SystemUnderTest(ctx, up.SystemOptions{Nodes: o.Nodes, Replicas: fmt.Sprintf("%s=%d", o.Stage, n), Keep: o.Keep, Name: "podflow-bench-scale"})
	if err != nil {
		return r, err
	}
	var placed []plan.Record
	defer func() {
		cleanup() // the replicas exit before their cgroups go
		for _, rec := range placed {
			if rerr := groups.Remove(rec.Name); rerr != nil && err == nil {
				err = rerr
			}
		}
	}()
	recs, err := plan.ReadRecords(ps.ChildrenFile)
	if err != nil {
		return r, err
	}
	for _, rec := range recs {
		if rec.Role != "stage/"+o.Stage || rec.PID <= 0 {
			continue
		}
		placed = append(placed, rec)
		b, err := groups.Place(rec.Name, rec.PID, o.StageCPU)
		if err != nil {
			return r, err
		}
		r.Bounds = append(r.Bounds, b)
	}
	if len(placed) != n {
		return r, fmt.Errorf("%d replicas of %s running, want %d", len(placed), o.Stage, n)
	}
	throttleBefore := groupsThrottle(groups, placed)
	before, err := takeCostSample(ctx, sess, ps)
	if err != nil {
		return r, fmt.Errorf("cost sample: %w", err)
	}

	sampler := startConsumerSampler(ctx, sess, o.Sample)
	prefix := fmt.Sprintf("scale-%d-%d-", n, round)
	start, offered, err := offerPods(ctx, sess, prefix, o.Pods, o.Rate, true)
	if err != nil {
		sampler.stop()
		return r, err
	}
	fmt.Fprintf(out, "  %d replicas, run %d: %d pods offered in %s, waiting for them to run\n", n, round, o.Pods, offered.Round(time.Millisecond))
	last, err := waitRunning(ctx, sess, start, prefix, o.Pods, time.Now().Add(time.Duration(o.Pods/10+60)*time.Second), nil)
	samples := sampler.stop()
	if err != nil {
		return r, err
	}
	r.PodsPerSec = float64(o.Pods) / last.Sub(start).Seconds()
	r.Consumers = summarizeLoad(samples)
	r.Stage = r.Consumers[bus.EncodeToken(o.Stage)]

	quiesce(ctx, sess, 30*time.Second)
	after, err := takeCostSample(ctx, sess, ps)
	if err != nil {
		return r, fmt.Errorf("cost sample: %w", err)
	}
	cost := after.since(before, o.Pods, 0, true)
	r.TotalCPUms = cost.TotalCPU
	for _, p := range cost.Processes {
		if p.Role == "stage/"+o.Stage {
			r.StageCPUms += p.CPUms
		}
	}
	throttleAfter := groupsThrottle(groups, placed)
	if d := throttleAfter.Periods - throttleBefore.Periods; d > 0 {
		r.Throttled = float64(throttleAfter.Throttled-throttleBefore.Throttled) / float64(d)
	}
	now, _ := plan.ReadRecords(ps.ChildrenFile)
	for _, p := range placed {
		if !slices.ContainsFunc(now, func(c plan.Record) bool { return c.Name == p.Name && c.PID == p.PID }) {
			r.Restarted = append(r.Restarted, p.Name)
		}
	}
	return r, nil
}

// groupsThrottle sums the cpu.stat of the replicas' cgroups.
func groupsThrottle(groups *cpuGroups, recs []plan.Record) cpuThrottle {
	var sum cpuThrottle
	for _, rec := range recs {
		t, _ := groups.Throttle(rec.Name)
		sum.Periods += t.Periods
		sum.Throttled += t.Throttled
	}
	return sum
}

func load1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// consumerSample is one durable consumer at one instant.
type consumerSample struct {
	pending, ackPending uint64
	maxAckPending       int
}

// consumerSampler reads every durable consumer of the events stream every
// interval, from its own goroutine, until stop.
type consumerSampler struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	samples map[string][]consumerSample
}

func startConsumerSampler(ctx context.Context, sess *client.Session, interval time.Duration) *consumerSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &consumerSampler{cancel: cancel, done: make(chan struct{}), samples: map[string][]consumerSample{}}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.sampleOnce(ctx, sess)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *consumerSampler) sampleOnce(ctx context.Context, sess *client.Session) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := sess.Bus.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		return
	}
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.Config.Durable == "" {
			continue // ordered consumers, the bench's own among them
		}
		s.mu.Lock()
		s.samples[ci.Name] = append(s.samples[ci.Name], consumerSample{pending: ci.NumPending, ackPending: uint64(ci.NumAckPending), maxAckPending: ci.Config.MaxAckPending})
		s.mu.Unlock()
	}
}

// stop ends the sampling and returns the samples by consumer.
func (s *consumerSampler) stop() map[string][]consumerSample {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// summarizeLoad reduces each consumer's samples to medians and peaks.
func summarizeLoad(samples map[string][]consumerSample) map[string]ConsumerLoad {
	out := map[string]ConsumerLoad{}
	for name, ss := range samples {
		var pend, ack []uint64
		l := ConsumerLoad{Samples: len(ss)}
		for _, s := range ss {
			pend, ack = append(pend, s.pending), append(ack, s.ackPending)
			l.MaxAckPending = s.maxAckPending
		}
		l.PendingP50, l.PendingMax = medianMax(pend)
		l.AckPendingP50, l.AckPendingMax = medianMax(ack)
		out[name] = l
	}
	return out
}

func medianMax(v []uint64) (median, peak uint64) {
	if len(v) == 0 {
		return 0, 0
	}
	slices.Sort(v)
	return v[len(v)/2], v[len(v)-1]
}

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// print writes every run, the medians per replica count (pods/s as a ratio
// to the first count's) and every consumer's median peak pending.
func (rep *ScaleReport) print(out io.Writer) {
	st := rep.Stage
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "replicas\trun\tload\tpods/s\t%s ms/pod\tall ms/pod\tthrottled\tpending p50\tpending max\tack pending p50\tack pending max\t\n", st)
	for _, r := range rep.Runs {
		mark := ""
		if len(r.Restarted) > 0 {
			mark = " (restarted: " + strings.Join(r.Restarted, ",") + ", unbounded)"
		}
		fmt.Fprintf(tw, "%d\t%d\t%.1f\t%.0f\t%.3f\t%.2f\t%.0f%%\t%d\t%d\t%d\t%d / %d\t%s\n", r.Replicas, r.Run, r.Load1, r.PodsPerSec, r.StageMsPerPod(), r.TotalMsPerPod(),
			100*r.Throttled, r.Stage.PendingP50, r.Stage.PendingMax, r.Stage.AckPendingP50, r.Stage.AckPendingMax, r.Stage.MaxAckPending, mark)
	}
	tw.Flush()

	var counts []int
	byCount := map[int][]ScaleRun{}
	for _, r := range rep.Runs {
		if _, ok := byCount[r.Replicas]; !ok {
			counts = append(counts, r.Replicas)
		}
		byCount[r.Replicas] = append(byCount[r.Replicas], r)
	}
	med := func(rs []ScaleRun, f func(ScaleRun) float64) float64 {
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		return medianF(v)
	}
	fmt.Fprintf(out, "\nmedians (%s bounded to %.3g CPU per replica)\n", st, rep.StageCPU)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "replicas\truns\tpods/s\tvs %d\t%s ms/pod\tpending max\tack pending max\t\n", firstOr(counts), st)
	var base float64
	for i, n := range counts {
		rs := byCount[n]
		pps := med(rs, func(r ScaleRun) float64 { return r.PodsPerSec })
		if i == 0 {
			base = pps
		}
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.2f×\t%.3f\t%.0f\t%.0f\t\n", n, len(rs), pps, pps/max(base, 1e-9),
			med(rs, ScaleRun.StageMsPerPod),
			med(rs, func(r ScaleRun) float64 { return float64(r.Stage.PendingMax) }),
			med(rs, func(r ScaleRun) float64 { return float64(r.Stage.AckPendingMax) }))
	}
	tw.Flush()

	names := map[string]bool{}
	for _, r := range rep.Runs {
		for c := range r.Consumers {
			names[c] = true
		}
	}
	consumers := slices.Sorted(maps.Keys(names))
	fmt.Fprintln(out, "\npeak pending per consumer (median over the runs), by replicas of "+st)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "consumer\t")
	for _, n := range counts {
		fmt.Fprintf(tw, "%d\t", n)
	}
	fmt.Fprintln(tw)
	for _, c := range consumers {
		fmt.Fprintf(tw, "%s\t", c)
		for _, n := range counts {
			fmt.Fprintf(tw, "%.0f\t", med(byCount[n], func(r ScaleRun) float64 { return float64(r.Consumers[c].PendingMax) }))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func firstOr(v []int) int {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

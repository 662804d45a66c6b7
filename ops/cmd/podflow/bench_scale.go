package main

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

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/services/pipeline"
)

func init() { registerBench(newBenchScaleCmd) }

type benchScaleOptions struct {
	stage      string
	replicas   string // "1,2"
	stageCPU   float64
	pods       int
	rate       int
	nodes      int
	runs       int
	jsonOut    string
	keep       bool
	cgroupRoot string
	sample     time.Duration

	counts []int // parsed from replicas
}

// newBenchScaleCmd is `podflow bench scale`.
func newBenchScaleCmd() *cobra.Command {
	o := &benchScaleOptions{}
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Pods/s with 1, 2, … replicas of one stage, each bounded to the same CPU, the rest held fixed",
		Long: `Run the whole system (as ` + "`podflow bench pipeline`" + ` does: its own ` + "`podflow up`" + `
with simulated nodes) once per replica count of --stage, alternating the
counts for --runs rounds, and bound every replica of that stage to
--stage-cpu CPUs in a cgroup of its own (podflow-bench-scale-<pid>/<replica>,
cgroup v2 cpu.max or v1 cpu.cfs_quota_us; removed at the end, also on
failure or interrupt). With one replica bounded the stage is the
bottleneck; a second gets as much CPU again, so the table shows what
adding a replica of the saturated stage buys when CPU is available.

Per run: pods/s, the stage's CPU ms per pod (all its replicas, from
/proc), the share of CFS periods its bound throttled, and its durable
consumer's pending and ack pending sampled during the run (what
` + "`podflow streams`" + ` shows); then the medians per replica count and every
consumer's peak pending. Needs root and a cgroup cpu controller; skips
otherwise.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.parse(); err != nil {
				return err
			}
			return runBenchScale(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.stage, "stage", pipeline.Scheduler, "the stage to scale")
	f.StringVar(&o.replicas, "replicas", "1,2", "replica counts of the stage to compare, e.g. 1,2,3")
	f.Float64Var(&o.stageCPU, "stage-cpu", 0.1, "CPUs each replica of the stage may use (its cgroup's CPU bound)")
	f.IntVar(&o.pods, "pods", 3000, "pods to request per run")
	f.IntVar(&o.rate, "rate", 1200, "offered load, PodRequested events per second")
	f.IntVar(&o.nodes, "nodes", 100, "simulated nodes")
	f.IntVar(&o.runs, "runs", 3, "runs of each replica count (alternating)")
	f.StringVar(&o.jsonOut, "json", "", "also write every run as JSON to this file")
	f.BoolVar(&o.keep, "keep", false, "keep each run's data directory (its logs among them)")
	f.StringVar(&o.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the cgroup hierarchies are mounted")
	f.DurationVar(&o.sample, "sample", 250*time.Millisecond, "how often the consumers are sampled during a run")
	return cmd
}

// parse validates the options and parses --replicas.
func (o *benchScaleOptions) parse() error {
	if !pipeline.Known(o.stage) {
		return fmt.Errorf("--stage %q: stages are %s", o.stage, strings.Join(pipeline.Stages, ", "))
	}
	counts, err := parseReplicaCounts(o.replicas)
	if err != nil {
		return err
	}
	o.counts = counts
	switch {
	case !(o.stageCPU > 0) || o.stageCPU > float64(runtime.NumCPU()):
		return fmt.Errorf("--stage-cpu %v: want more than 0 and at most the %d CPUs of this machine", o.stageCPU, runtime.NumCPU())
	case quotaUs(o.stageCPU) < minQuotaUs:
		return fmt.Errorf("--stage-cpu %v: below the kernel's smallest CPU quota (%d µs per %d µs, %.2f CPUs)", o.stageCPU, minQuotaUs, cpuPeriodUs, float64(minQuotaUs)/cpuPeriodUs)
	case o.pods < 1 || o.rate < 1 || o.nodes < 1 || o.runs < 1:
		return fmt.Errorf("--pods, --rate, --nodes and --runs must be positive")
	case o.sample <= 0:
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

func runBenchScale(ctx context.Context, o *benchScaleOptions, out io.Writer) error {
	groups, err := newCPUGroups(o.cgroupRoot)
	if errors.Is(err, ErrNoCPUCgroup) {
		fmt.Fprintf(out, "bench scale: skipped: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer groups.Close()
	rep := &ScaleReport{Stage: o.stage, StageCPU: o.stageCPU, Cgroup: groups.Mode(), Pods: o.pods, Rate: o.rate, Nodes: o.nodes}
	fmt.Fprintf(out, "bench scale: stage %s, %.3g CPU per replica (cgroup %s, %s), %d pods at %d/s offered, %d simulated nodes, %d runs of each of %v, alternating\n",
		o.stage, o.stageCPU, groups.Mode(), groups.Root(), o.pods, o.rate, o.nodes, o.runs, o.counts)
	for round := 1; round <= o.runs; round++ {
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
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(o.jsonOut, b, 0o644)
	}
	return nil
}

// runScaleOnce starts a system with n replicas of the stage, bounds each
// in a cgroup, offers the load and stops the system (and removes the
// cgroups) again.
func runScaleOnce(ctx context.Context, o *benchScaleOptions, groups *cpuGroups, n, round int, out io.Writer) (r ScaleRun, err error) {
	r = ScaleRun{Replicas: n, Run: round, Pods: o.pods, Load1: load1()}
	sess, ps, cleanup, err := systemUnderTestProcs(ctx, "", o.nodes, fmt.Sprintf("%s=%d", o.stage, n), !o.keep, "podflow-bench-scale", nil)
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
	recs, err := plan.ReadRecords(ps.childrenFile)
	if err != nil {
		return r, err
	}
	for _, rec := range recs {
		if rec.Role != "stage/"+o.stage || rec.PID <= 0 {
			continue
		}
		placed = append(placed, rec)
		b, err := groups.Place(rec.Name, rec.PID, o.stageCPU)
		if err != nil {
			return r, err
		}
		r.Bounds = append(r.Bounds, b)
	}
	if len(placed) != n {
		return r, fmt.Errorf("%d replicas of %s running, want %d", len(placed), o.stage, n)
	}
	throttleBefore := groupsThrottle(groups, placed)
	before, err := takeCostSample(ctx, sess, ps)
	if err != nil {
		return r, fmt.Errorf("cost sample: %w", err)
	}

	sampler := startConsumerSampler(ctx, sess, o.sample)
	prefix := fmt.Sprintf("scale-%d-%d-", n, round)
	start, offered, err := offerPods(ctx, sess, prefix, o.pods, o.rate)
	if err != nil {
		sampler.stop()
		return r, err
	}
	fmt.Fprintf(out, "  %d replicas, run %d: %d pods offered in %s, waiting for them to run\n", n, round, o.pods, offered.Round(time.Millisecond))
	last, err := waitRunning(ctx, sess, start, prefix, o.pods, time.Now().Add(time.Duration(o.pods/10+60)*time.Second))
	samples := sampler.stop()
	if err != nil {
		return r, err
	}
	r.PodsPerSec = float64(o.pods) / last.Sub(start).Seconds()
	r.Consumers = summarizeLoad(samples)
	r.Stage = r.Consumers[bus.EncodeToken(o.stage)]

	quiesce(ctx, sess, 30*time.Second)
	after, err := takeCostSample(ctx, sess, ps)
	if err != nil {
		return r, fmt.Errorf("cost sample: %w", err)
	}
	cost := after.since(before, o.pods, 0, true)
	r.TotalCPUms = cost.TotalCPU
	for _, p := range cost.Processes {
		if p.Role == "stage/"+o.stage {
			r.StageCPUms += p.CPUms
		}
	}
	throttleAfter := groupsThrottle(groups, placed)
	if d := throttleAfter.Periods - throttleBefore.Periods; d > 0 {
		r.Throttled = float64(throttleAfter.Throttled-throttleBefore.Throttled) / float64(d)
	}
	now, _ := plan.ReadRecords(ps.childrenFile)
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

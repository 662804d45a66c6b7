package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/schedsim"
)

// SchedulerOptions configure RunScheduler (`podflow bench scheduler`).
type SchedulerOptions struct {
	Nodes, Pods, Replicas, StoreReplicas   int
	NodeCPU, NodeMemory, PodCPU, PodMemory string
	NodePods, Concurrency                  int
	Shape                                  string // basic, topology-spreading, anti-affinity or preemption
	InitPods                               int    // -1: the shape's
	NoSync                                 bool   // do not fsync the raft log
	CPUProfile                             string // of the measured phase
	Timeout                                time.Duration
}

func RunScheduler(ctx context.Context, o *SchedulerOptions, out io.Writer) error {
	if o.Nodes < 1 || o.Pods < 1 || o.Replicas < 1 || o.StoreReplicas < 1 {
		return fmt.Errorf("bench scheduler: --nodes, --pods, --replicas and --store-replicas must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "podflow-bench-scheduler-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := schedsim.DefaultConfig(dir)
	cfg.StoreReplicas, cfg.StoreNoSync, cfg.Concurrency = o.StoreReplicas, o.NoSync, o.Concurrency
	sync := "fsync"
	if o.NoSync {
		sync = "no fsync"
	}
	nodes, initPods, pods, err := benchShape(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "bench scheduler: shape %s, %d nodes, %d init pods, %d pods, %d scheduler replica(s), %d store replicas (%s); load average %s\n",
		o.Shape, o.Nodes, len(initPods), o.Pods, o.Replicas, o.StoreReplicas, sync, loadAverage())

	start := time.Now()
	env, err := schedsim.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	start = time.Now()
	if err := env.CreateNodes(ctx, nodes); err != nil {
		return err
	}
	fmt.Fprintf(out, "  setup: %d nodes written in %s\n", o.Nodes, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if err := env.CreatePods(ctx, append(append([]*corev1.Pod(nil), initPods...), pods...)); err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(out, "  setup: %d pods written in %s (%.0f creates/s)\n", o.Pods, took.Round(time.Millisecond), float64(o.Pods)/took.Seconds())
	var replicas []*schedsim.Replica
	var regs []*prometheus.Registry // by replica: the stage's metrics
	for i := range o.Replicas {
		r, err := env.StartReplica(ctx, fmt.Sprintf("scheduler-%d", i))
		if err != nil {
			return err
		}
		replicas = append(replicas, r)
		reg := prometheus.NewRegistry()
		if err := r.Stage.RegisterMetrics(reg); err != nil {
			return err
		}
		regs = append(regs, reg)
	}
	if o.Shape == "preemption" {
		fin, err := env.StartFinalizer(ctx)
		if err != nil {
			return err
		}
		defer fin.Stop()
	}
	if len(initPods) > 0 {
		start = time.Now()
		if err := env.Publish(ctx, initPods); err != nil {
			return err
		}
		if err := env.Scheduled.Wait(ctx, len(initPods)); err != nil {
			return err
		}
		fmt.Fprintf(out, "  setup: %d init pods scheduled in %s\n", len(initPods), time.Since(start).Round(time.Millisecond))
	}

	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	times0, err := gatherCycleTimes(regs)
	if err != nil {
		return err
	}
	cpu0 := cpuTime()
	start = time.Now()
	if err := env.Publish(ctx, pods); err != nil {
		return err
	}
	published := time.Since(start)
	if err := env.Scheduled.Wait(ctx, len(initPods)+o.Pods); err != nil {
		return err
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	if o.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	ph := env.Scheduled.Phases()
	fmt.Fprintf(out, "  %d pods scheduled and bound in %s (PodPersisted published in %s)\n", o.Pods, elapsed.Round(time.Millisecond), published.Round(time.Millisecond))
	fmt.Fprintf(out, "  %.0f pods/s\n", float64(o.Pods)/elapsed.Seconds())
	if len(initPods) > 0 {
		fmt.Fprintf(out, "  (the times below include the init pods')\n")
	}
	fmt.Fprintf(out, "  filter:      %s\n  score:       %s\n  bind commit: %s\n", ph.Filter, ph.Score, ph.Bind)
	fmt.Fprintf(out, "  conflicts:   %d lost bind races, %d pods had any (max %d for one pod)\n", ph.Conflicts, ph.PodsWithConflicts, ph.MaxConflictsOfOnePod)
	var per []string
	for _, r := range replicas {
		c := &r.Stage.Counters
		per = append(per, fmt.Sprintf("%s %d bound/%d conflicts/%d errors", r.Name, c.Scheduled.Load(), c.Conflicts.Load(), c.Errors.Load()))
	}
	fmt.Fprintf(out, "  replicas:    %s\n", strings.Join(per, ", "))
	fmt.Fprintf(out, "  cpu:         %.1fs of this process (bus, store and scheduler) over %.1fs: %.0f pods per cpu-second; load average %s\n",
		cpu.Seconds(), elapsed.Seconds(), float64(o.Pods)/cpu.Seconds(), loadAverage())
	times1, err := gatherCycleTimes(regs)
	if err != nil {
		return err
	}
	printCycleTimes(out, times1.minus(times0), cpu)

	start = time.Now()
	rep, err := env.Verify(ctx)
	if err != nil {
		return err
	}
	if err := rep.Err(); err != nil {
		return err
	}
	if want := len(initPods) + o.Pods; rep.Binds != want || (o.Shape != "preemption" && rep.Bound != want) {
		return fmt.Errorf("bench scheduler: %d of %d pods bound, %d binds in the history", rep.Bound, want, rep.Binds)
	}
	fmt.Fprintf(out, "  invariants:  every pod bound once, no node overcommitted in %d allocation writes (checked in %s)\n",
		rep.AllocationWrites, time.Since(start).Round(time.Millisecond))
	return nil
}

// benchShape returns the nodes, the init pods and the measured pods of
// o's shape.
func benchShape(o *SchedulerOptions) (nodes []*corev1.Node, initPods, pods []*corev1.Pod, err error) {
	nodes = schedsim.Nodes(o.Nodes, o.NodeCPU, o.NodeMemory, o.NodePods)
	pods = schedsim.Pods(o.Pods, o.PodCPU, o.PodMemory)
	initN := func(def int) int {
		if o.InitPods >= 0 {
			return o.InitPods
		}
		return def
	}
	named := func(n int, cpu string) []*corev1.Pod {
		out := make([]*corev1.Pod, n)
		for i := range out {
			out[i] = schedsim.Pod("bench", fmt.Sprintf("init-%05d", i), cpu, o.PodMemory)
		}
		return out
	}
	labelled := func(ps []*corev1.Pod, k, v string) {
		for _, p := range ps {
			p.Metadata.Labels = map[string]string{k: v}
		}
	}
	switch o.Shape {
	case "basic":
		initPods = named(initN(0), o.PodCPU)
	case "topology-spreading":
		for i, n := range nodes {
			n.Metadata.Labels[podtopologyspread.LabelTopologyZone] = fmt.Sprintf("moon-%d", i%3+1)
		}
		initPods = named(initN(o.Nodes), o.PodCPU)
		labelled(pods, "color", "blue")
		for _, p := range pods {
			p.Spec.TopologySpreadConstraints = []*corev1.TopologySpreadConstraint{{
				MaxSkew: 5, TopologyKey: podtopologyspread.LabelTopologyZone, WhenUnsatisfiable: "DoNotSchedule",
				LabelSelector: &corev1.LabelSelector{MatchLabels: map[string]string{"color": "blue"}},
			}}
		}
	case "anti-affinity":
		initPods = named(initN(o.Nodes/5), o.PodCPU)
		for _, p := range append(append([]*corev1.Pod(nil), initPods...), pods...) {
			p.Metadata.Labels = map[string]string{"color": "green"}
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{{
					TopologyKey: podtopologyspread.LabelHostname, LabelSelector: &corev1.LabelSelector{MatchLabels: map[string]string{"color": "green"}},
				}},
			}}
		}
	case "preemption":
		initPods = named(initN(4*o.Nodes), "900m")
		for _, p := range initPods {
			p.Spec.Priority = proto.Int32(10)
		}
		pods = make([]*corev1.Pod, o.Pods)
		for i := range pods {
			pods[i] = schedsim.Pod("bench", fmt.Sprintf("pod-%05d", i), "3", o.PodMemory)
			pods[i].Spec.Priority = proto.Int32(100)
		}
	default:
		return nil, nil, nil, fmt.Errorf("bench scheduler: unknown --shape %q (basic, topology-spreading, anti-affinity, preemption)", o.Shape)
	}
	return nodes, initPods, pods, nil
}

// cpuTime returns the user and system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// cycleTimes are the scheduler's own timings summed over the replicas'
// registries: the sampled cycles' plugin times
// (scheduler_plugin_execution_duration_seconds) by extension point and
// plugin, and the attempts (scheduler_scheduling_attempt_duration_seconds:
// the cycle and the bind) by result.
type cycleTimes map[cycleKey]cycleTime

type cycleKey struct{ point, name string } // point "attempt": name is the result

type cycleTime struct {
	count uint64
	sum   float64 // seconds
}

// gatherCycleTimes reads the cycle times of regs.
func gatherCycleTimes(regs []*prometheus.Registry) (cycleTimes, error) {
	out := cycleTimes{}
	for _, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			return nil, err
		}
		for _, mf := range mfs {
			var attempt bool
			switch mf.GetName() {
			case "scheduler_plugin_execution_duration_seconds":
			case "scheduler_scheduling_attempt_duration_seconds":
				attempt = true
			default:
				continue
			}
			for _, m := range mf.GetMetric() {
				var k cycleKey
				if attempt {
					k.point = "attempt"
				}
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "plugin", "result":
						k.name = l.GetValue()
					case "extension_point":
						k.point = l.GetValue()
					}
				}
				h := m.GetHistogram()
				t := out[k]
				t.count += h.GetSampleCount()
				t.sum += h.GetSampleSum()
				out[k] = t
			}
		}
	}
	return out, nil
}

// minus returns t less the earlier reading t0.
func (t cycleTimes) minus(t0 cycleTimes) cycleTimes {
	out := cycleTimes{}
	for k, v := range t {
		v.count -= t0[k].count
		v.sum -= t0[k].sum
		if v.count > 0 {
			out[k] = v
		}
	}
	return out
}

// cyclePoints orders the extension points as a cycle runs them.
var cyclePoints = []string{"PreFilter", "Filter", "PostFilter", "PreScore", "Score", "NormalizeScore"}

// printCycleTimes prints where the measured phase's scheduling time went,
// kube-scheduler's way: each plugin's mean time per sampled cycle at each
// extension point and its share of all plugin time; then the plugin time
// of every cycle, estimated from the sampled ones, against the process's
// cpu, and the mean attempt (cycle and bind). The times are wall times
// (as kube-scheduler's): on a loaded machine the means carry the time a
// cycle was descheduled, so the share is an upper bound.
func printCycleTimes(out io.Writer, t cycleTimes, cpu time.Duration) {
	var total float64
	var sampled uint64 // cycles: no plugin is observed twice in one
	for k, v := range t {
		if k.point != "attempt" {
			total += v.sum
			sampled = max(sampled, v.count)
		}
	}
	if sampled == 0 || total <= 0 {
		return
	}
	fmt.Fprintf(out, "  plugins:     %d sampled cycles (scheduler_plugin_execution_duration_seconds); mean per cycle the plugin ran, share of the plugins' time\n", sampled)
	for _, point := range cyclePoints {
		var keys []cycleKey
		for k := range t {
			if k.point == point {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, func(a, b cycleKey) int { return cmp.Compare(t[b].sum, t[a].sum) })
		for _, k := range keys {
			v := t[k]
			fmt.Fprintf(out, "    %-15s %-32s %9s %5.1f%%\n", point, k.name,
				time.Duration(v.sum/float64(v.count)*1e9).Round(10*time.Nanosecond), 100*v.sum/total)
		}
	}
	var attempts uint64
	var attemptSum float64
	for k, v := range t {
		if k.point == "attempt" {
			attempts += v.count
			attemptSum += v.sum
		}
	}
	if attempts == 0 {
		return
	}
	all := total * float64(attempts) / float64(sampled)
	fmt.Fprintf(out, "  cycles:      plugins ~%.2fs over %d attempts (estimated from the sampled cycles; wall time, so with the time descheduled on a busy machine): %.1f%% of the process cpu; attempt (cycle and bind) mean %s\n",
		all, attempts, 100*all/cpu.Seconds(), time.Duration(attemptSum/float64(attempts)*1e9).Round(time.Microsecond))
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/up"
)

// WorkloadHelp is the help of `podflow bench workload` (RunWorkload).
const WorkloadHelp = `Create one Deployment of --pods pods on a podflow system with simulated
nodes and time it until every pod is available; then change its pod template
(an annotation) and time the RollingUpdate (--max-surge, --max-unavailable)
until the rollout is complete as ` + "`kubectl rollout status`" + ` decides it; then
delete the Deployment and wait, untimed, until its pods are gone. It does so
--runs times and reports each run and the medians: the time until every pod
was created (the Deployment's status.replicas), Ready and available, and the
rollout's duration, with the fewest available and the most pods the
Deployment's status showed during the rollout (sampled every 100ms, so a
brief excursion can be missed) against replicas - maxUnavailable and
replicas + maxSurge. It ends with the cost of each phase, the median over
the runs: the CPU time of every process (each stage, the store replicas,
NATS, the node agents), the JetStream messages, the store writes and
reads, counted as ` + "`podflow bench pipeline`" + ` counts them. It works on the
configured system, or with --own (or when none is configured) starts its
own ` + "`podflow up`" + ` with --nodes simulated nodes; --profile-dir has every
process of that system write a CPU profile of its life. --no-token sets the
pods' automountServiceAccountToken to false (no ServiceAccount token volume:
the node agents then request no token per pod). It notes at the start when
the schedulable nodes hold fewer pods than replicas + maxSurge: the
rollout's new pods then wait for old ones to terminate.`

// WorkloadOptions configure RunWorkload (`podflow bench workload`).
type WorkloadOptions struct {
	Config         string // the system's client configuration ("": the configured one, else its own)
	Own            bool   // start a system of its own even when one is configured
	Replicas       int    // pods of the Deployment
	Nodes          int    // simulated nodes of its own system
	Runs           int    // create/rollout/delete rounds
	StageReplicas  string // stage replicas of its own system, "replicaset=2"
	MaxSurge       string // the Deployment's maxSurge (count or percentage)
	MaxUnavailable string // the Deployment's maxUnavailable
	Keep           bool   // keep its own system's data directory
	Profiles       string // every process of its own system writes a CPU profile here
	// NoToken sets the pods' automountServiceAccountToken to false: no
	// token volume, so the nodes request no token per pod.
	NoToken bool
	// NoRollout skips the rolling update: each round creates the
	// Deployment, waits until it is available and deletes it.
	NoRollout bool
	Timeout   time.Duration
}

// Validate checks the options.
func (o *WorkloadOptions) Validate() error {
	if o.Replicas < 1 || o.Runs < 1 {
		return errors.New("bench workload: --pods and --runs must be positive")
	}
	if o.Timeout <= 0 {
		return errors.New("bench workload: --timeout must be positive")
	}
	for flag, v := range map[string]string{"--max-surge": o.MaxSurge, "--max-unavailable": o.MaxUnavailable} {
		if _, err := scaledValue(v, o.Replicas); err != nil {
			return fmt.Errorf("bench workload: %s %q: %w", flag, v, err)
		}
	}
	if o.Profiles != "" && o.Config != "" {
		return errors.New("bench workload: --profile-dir profiles the system bench starts itself, not one given by --config")
	}
	return nil
}

// scaledValue is kube's intstr.GetScaledValueFromIntOrPercent of v over
// total: a count, or a percentage rounded up (maxSurge's rounding; the
// report's bounds use it for both, as a bound it is the looser one).
func scaledValue(v string, total int) (int, error) {
	iv := intstr.Parse(v)
	if iv.Type == intstr.String && (len(v) < 2 || v[len(v)-1] != '%') {
		return 0, errors.New("want a count or a percentage")
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&iv, total, true)
	if err == nil && n < 0 {
		err = errors.New("negative")
	}
	return n, err
}

// workloadRun is what one round measured.
type workloadRun struct {
	created, ready, available time.Duration // since the create
	rollout                   time.Duration
	minAvailable, maxPods     int32
	createCost, rolloutCost   *CostReport
}

// RunWorkload runs the benchmark (see WorkloadHelp).
func RunWorkload(ctx context.Context, o *WorkloadOptions, out io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Profiles != "" {
		o.Own = true
		dir, err := filepath.Abs(o.Profiles)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		os.Setenv(ProfileDirEnv, dir) // inherited by `podflow up` and its children
		defer os.Unsetenv(ProfileDirEnv)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	sess, ps, cleanup, err := up.SystemUnderTest(ctx, up.SystemOptions{Config: o.Config, Own: o.Own, Out: out, Nodes: o.Nodes, Replicas: o.StageReplicas, Keep: o.Keep, Name: "podflow-bench"})
	if err != nil {
		return err
	}
	defer cleanup()
	if ps.ChildrenFile == "" {
		return errors.New("bench workload: the system's directory is unknown (no kubeconfig to use)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", plan.Layout{Dir: filepath.Dir(ps.ChildrenFile)}.Kubeconfig())
	if err != nil {
		return fmt.Errorf("bench workload: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("bench workload: %w", err)
	}
	surge, _ := scaledValue(o.MaxSurge, o.Replicas)
	unavail, _ := scaledValue(o.MaxUnavailable, o.Replicas)
	fmt.Fprintf(out, "bench workload: a Deployment of %d replicas (maxSurge %s = %d, maxUnavailable %s = %d), %d runs\n",
		o.Replicas, o.MaxSurge, surge, o.MaxUnavailable, unavail, o.Runs)
	if nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil && podSlots(nodes.Items) < o.Replicas+surge {
		fmt.Fprintf(out, "bench workload: note: the nodes hold %d pods, fewer than replicas + maxSurge (%d): the rollout's new pods wait for old ones to terminate\n",
			podSlots(nodes.Items), o.Replicas+surge)
	}
	var runs []workloadRun
	for i := range o.Runs {
		name := fmt.Sprintf("bench-wl-%d-%d", time.Now().UnixNano()%1_000_000, i)
		r, err := workloadRound(ctx, cs, sess, ps, o, name, i, out)
		if err != nil {
			return err
		}
		runs = append(runs, r)
		fmt.Fprintf(out, "run %d: created %s, ready %s, available %s; rollout %s (available ≥ %d, pods ≤ %d)\n",
			i+1, r.created.Round(time.Millisecond), r.ready.Round(time.Millisecond), r.available.Round(time.Millisecond),
			r.rollout.Round(time.Millisecond), r.minAvailable, r.maxPods)
		if i == o.Runs-1 && o.Own {
			break // the system bench started is torn down with its pods
		}
		if err := deleteWorkload(ctx, cs, name); err != nil {
			return err
		}
	}
	med := func(f func(workloadRun) time.Duration) time.Duration {
		var ds []time.Duration
		for _, r := range runs {
			ds = append(ds, f(r))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2].Round(time.Millisecond)
	}
	fmt.Fprintf(out, "\nmedian of %d: %d replicas created %s, ready %s, available %s; rollout complete %s\n", len(runs), o.Replicas,
		med(func(r workloadRun) time.Duration { return r.created }), med(func(r workloadRun) time.Duration { return r.ready }),
		med(func(r workloadRun) time.Duration { return r.available }), med(func(r workloadRun) time.Duration { return r.rollout }))
	if !o.NoRollout {
		worst := runs[0]
		for _, r := range runs {
			worst.minAvailable, worst.maxPods = min(worst.minAvailable, r.minAvailable), max(worst.maxPods, r.maxPods)
		}
		verdict := "held"
		if int(worst.minAvailable) < o.Replicas-unavail || int(worst.maxPods) > o.Replicas+surge {
			verdict = "VIOLATED"
		}
		fmt.Fprintf(out, "rollout bounds (every run): available ≥ %d (min seen %d), pods ≤ %d (max seen %d): %s\n",
			o.Replicas-unavail, worst.minAvailable, o.Replicas+surge, worst.maxPods, verdict)
	}
	printPhaseCosts(out, "create until available", o.Replicas, runs, func(r workloadRun) *CostReport { return r.createCost })
	if !o.NoRollout {
		printPhaseCosts(out, "rollout until complete", o.Replicas, runs, func(r workloadRun) *CostReport { return r.rolloutCost })
	}
	return nil
}

// workloadRound creates and rolls out one Deployment.
func workloadRound(ctx context.Context, cs kubernetes.Interface, sess *client.Session, ps up.Procs, o *WorkloadOptions, name string, i int, out io.Writer) (workloadRun, error) {
	var r workloadRun
	d := workloadDeployment(name, int32(o.Replicas), o.MaxSurge, o.MaxUnavailable)
	if o.NoToken {
		d.Spec.Template.Spec.AutomountServiceAccountToken = new(false)
	}
	deps := cs.AppsV1().Deployments("default")

	before, err := takeCostSample(ctx, sess, ps)
	if err != nil {
		return r, fmt.Errorf("cost sample: %w", err)
	}
	start := time.Now()
	if _, err := deps.Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return r, fmt.Errorf("create deployment %q: %w", name, err)
	}
	want := int32(o.Replicas)
	said := time.Now()
	err = pollDeployment(ctx, deps, name, func(d *apps.Deployment) bool {
		st := d.Status
		if r.created == 0 && st.Replicas >= want {
			r.created = time.Since(start)
		}
		if r.ready == 0 && st.ReadyReplicas >= want {
			r.ready = time.Since(start)
		}
		if time.Since(said) >= 5*time.Second {
			said = time.Now()
			fmt.Fprintf(out, "bench workload: run %d: %d created, %d ready, %d available after %s\n", i+1, st.Replicas, st.ReadyReplicas, st.AvailableReplicas, time.Since(start).Round(time.Second))
		}
		return st.ObservedGeneration >= d.Generation && st.AvailableReplicas >= want && st.UpdatedReplicas >= want
	})
	if err != nil {
		return r, fmt.Errorf("deployment %q not available: %w", name, err)
	}
	r.available = time.Since(start)
	r.created, r.ready = nonZero(r.created, r.available), nonZero(r.ready, r.available)
	quiesced := quiesce(ctx, sess, 60*time.Second)
	mid, err := takeCostSample(ctx, sess, ps)
	if err != nil {
		return r, fmt.Errorf("cost sample: %w", err)
	}
	r.createCost = mid.since(before, o.Replicas, 0, quiesced)
	if o.NoRollout {
		return r, nil
	}

	// The rollout: a new template (an annotation), timed until complete as
	// kubectl rollout status decides it.
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"bench.podflow.io/rollout":%q}}}}}`, strconv.Itoa(i+1))
	start = time.Now()
	if _, err := deps.Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return r, fmt.Errorf("patch deployment %q: %w", name, err)
	}
	r.minAvailable, r.maxPods = want, want
	said = time.Now()
	err = pollDeployment(ctx, deps, name, func(d *apps.Deployment) bool {
		st := d.Status
		r.minAvailable, r.maxPods = min(r.minAvailable, st.AvailableReplicas), max(r.maxPods, st.Replicas)
		if time.Since(said) >= 5*time.Second {
			said = time.Now()
			fmt.Fprintf(out, "bench workload: run %d: rollout: %d updated, %d pods, %d available after %s\n", i+1, st.UpdatedReplicas, st.Replicas, st.AvailableReplicas, time.Since(start).Round(time.Second))
		}
		return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas >= want && st.Replicas == want && st.AvailableReplicas >= want
	})
	if err != nil {
		return r, fmt.Errorf("rollout of deployment %q: %w", name, err)
	}
	r.rollout = time.Since(start)
	quiesced = quiesce(ctx, sess, 60*time.Second)
	end, err := takeCostSample(ctx, sess, ps)
	if err != nil {
		return r, fmt.Errorf("cost sample: %w", err)
	}
	r.rolloutCost = end.since(mid, o.Replicas, 0, quiesced)
	return r, nil
}

// podSlots is how many pods the schedulable nodes hold (the sum of
// their allocatable pods).
func podSlots(nodes []v1.Node) int {
	n := 0
	for _, nd := range nodes {
		if !nd.Spec.Unschedulable {
			n += int(nd.Status.Allocatable.Pods().Value())
		}
	}
	return n
}

// deleteWorkload deletes the Deployment and waits, untimed, until its pods
// are gone (before the next round).
func deleteWorkload(ctx context.Context, cs kubernetes.Interface, name string) error {
	deps := cs.AppsV1().Deployments("default")
	bg := metav1.DeletePropagationBackground
	if err := deps.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete deployment %q: %w", name, err)
	}
	sel := "app=" + name
	for {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
		if err == nil && len(l.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pods of deployment %q not gone: %w", name, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func nonZero(d, or time.Duration) time.Duration {
	if d == 0 {
		return or
	}
	return d
}

// pollDeployment reads the Deployment every 100ms until done says so.
func pollDeployment(ctx context.Context, deps interface {
	Get(context.Context, string, metav1.GetOptions) (*apps.Deployment, error)
}, name string, done func(*apps.Deployment) bool) error {
	for {
		d, err := deps.Get(ctx, name, metav1.GetOptions{})
		if err == nil && done(d) {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
			}
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// workloadDeployment is the benchmark's Deployment: one container, no
// probes, RollingUpdate with the given bounds.
func workloadDeployment(name string, replicas int32, surge, unavailable string) *apps.Deployment {
	labels := map[string]string{"app": name}
	ms, mu := intstr.Parse(surge), intstr.Parse(unavailable)
	return &apps.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: apps.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: apps.DeploymentStrategy{
				Type:          apps.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &apps.RollingUpdateDeployment{MaxSurge: &ms, MaxUnavailable: &mu},
			},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "podflow/http:1"}}},
			},
		},
	}
}

// printPhaseCosts prints, per process, the median CPU of a phase over the
// runs, and the median counts.
func printPhaseCosts(out io.Writer, phase string, pods int, runs []workloadRun, get func(workloadRun) *CostReport) {
	cpu := map[string][]float64{}
	var total, msgs, writes, reads []float64
	quiet := true
	for _, r := range runs {
		c := get(r)
		if c == nil {
			continue
		}
		quiet = quiet && c.Quiesced
		for _, p := range c.Processes {
			if p.Name != "bench" {
				cpu[p.Name] = append(cpu[p.Name], p.CPUms)
			}
		}
		total = append(total, c.TotalCPU)
		msgs = append(msgs, float64(c.Messages))
		writes = append(writes, float64(c.Store.WriteRequests))
		reads = append(reads, float64(c.Store.ReadRequests+c.Store.StaleReadRequests))
	}
	median := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	names := make([]string, 0, len(cpu))
	for n := range cpu {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return median(cpu[names[i]]) > median(cpu[names[j]]) })
	fmt.Fprintf(out, "\ncost of %q (median of %d runs, %d pods", phase, len(runs), pods)
	if !quiet {
		fmt.Fprint(out, "; the consumers had not drained at the end of a run")
	}
	fmt.Fprintln(out, ")")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "process\tCPU ms\tCPU ms/pod\t")
	per := func(v float64) string { return fmt.Sprintf("%.2f", v/float64(max(pods, 1))) }
	for _, n := range names {
		m := median(cpu[n])
		if m < 1 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t\n", n, m, per(m))
	}
	fmt.Fprintf(tw, "total\t%.0f\t%s\t\n", median(total), per(median(total)))
	fmt.Fprintf(tw, "JetStream messages\t%.0f\t%s\t\n", median(msgs), per(median(msgs)))
	fmt.Fprintf(tw, "store writes\t%.0f\t%s\t\n", median(writes), per(median(writes)))
	fmt.Fprintf(tw, "store reads\t%.0f\t%s\t\n", median(reads), per(median(reads)))
	tw.Flush()
}

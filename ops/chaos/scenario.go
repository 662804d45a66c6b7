package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/up"
	"github.com/podflow/podflow/services/pipeline"
)

// ScenarioNames are the workloads of --scenario: pods (the pod workload
// of Run, with every fault of --nemesis), rollout (a Deployment rolled out
// and scaled while the deployment and replicaset controllers' replicas are
// killed) and job (a Job of many completions while the job controller's
// replicas are killed).
var ScenarioNames = []string{"pods", "rollout", "job"}

// scenario is one controller workload: the stages whose replicas it
// kills, and its run, which drives the workload through cs and returns
// the violations it found.
type scenario struct {
	name   string
	stages []string
	run    func(ctx context.Context, s *scenarioRun) ([]string, error)
}

// scenarioRun is what a scenario's run gets: the options, the system's
// Kubernetes client, its output, and the kill loop's control.
type scenarioRun struct {
	o   *Options
	cs  kubernetes.Interface
	out io.Writer
	// startKills starts the kill loop (once the workload is under way);
	// stopKills stops it (once the workload is done) and waits for it.
	startKills, stopKills func()
	start                 time.Time
}

func (s *scenarioRun) say(format string, a ...any) {
	fmt.Fprintf(s.out, "  %6s  "+format+"\n", append([]any{time.Since(s.start).Round(time.Second)}, a...)...)
}

// runScenario runs the controller workload o.Scenario: a system (its own
// with two replicas of each attacked stage, or the configured one), the
// workload driven over the Kubernetes API, one SIGKILL of a replica of an
// attacked stage every o.KillInterval until o.Duration passed or o.MaxKills
// were made, then the scenario's checks. It returns an error with ExitCode
// 2 when an invariant broke.
func runScenario(ctx context.Context, o *Options, out io.Writer, rng *rand.Rand) error {
	var sc scenario
	switch o.Scenario {
	case "rollout":
		sc = scenario{name: "rollout", stages: []string{pipeline.Deployment, pipeline.ReplicaSet}, run: runRollout}
	case "job":
		sc = scenario{name: "job", stages: []string{pipeline.Job}, run: runJob}
	default:
		return fmt.Errorf("--scenario: unknown scenario %q (%s)", o.Scenario, strings.Join(ScenarioNames, ", "))
	}
	if o.Nemeses != "" && o.Nemeses != "kill" {
		return fmt.Errorf("--scenario %s: its faults are SIGKILLs of the %s controllers' replicas; leave out --nemesis", sc.name, strings.Join(sc.stages, ", "))
	}
	var replicas []string
	for _, s := range sc.stages {
		replicas = append(replicas, s+"=2")
	}
	sess, ps, cleanup, err := up.SystemUnderTest(ctx, up.SystemOptions{Config: o.Config, Own: o.Own, Out: out, Nodes: o.Nodes,
		Replicas: strings.Join(replicas, ","), Keep: o.Keep, Name: "podflow-chaos"})
	if err != nil {
		return err
	}
	defer cleanup()
	if ps.ChildrenFile == "" {
		return errors.New("chaos: the system's directory is unknown (no kubeconfig to use)")
	}
	dir := filepath.Dir(ps.ChildrenFile)
	cfg, err := clientcmd.BuildConfigFromFlags("", plan.Layout{Dir: dir}.Kubeconfig())
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	_ = sess
	fmt.Fprintf(out, "chaos: seed %d, scenario %s, a SIGKILL of a %s controller replica every %s for %s (at most %d)\n",
		o.Seed, sc.name, strings.Join(sc.stages, ", "), o.KillInterval, o.Duration, o.MaxKills)

	killCtx, stopKills := context.WithCancel(ctx)
	defer stopKills()
	killsDone, started := make(chan struct{}), make(chan struct{})
	var once sync.Once
	run := &scenarioRun{o: o, cs: cs, out: out, start: time.Now(),
		startKills: func() { once.Do(func() { close(started) }) },
		stopKills:  func() { stopKills(); <-killsDone }}
	kills := 0
	go func() {
		defer close(killsDone)
		select {
		case <-started:
		case <-killCtx.Done():
			return
		}
		kills = killLoop(killCtx, run, ps.ChildrenFile, sc.stages, rng)
	}()
	violations, err := sc.run(ctx, run)
	stopKills()
	<-killsDone
	if err != nil {
		return fmt.Errorf("chaos %s: %w", sc.name, err)
	}
	fmt.Fprintf(out, "chaos: %d kills of %s controller replicas\n", kills, strings.Join(sc.stages, ", "))
	for _, v := range violations {
		fmt.Fprintf(out, "  VIOLATION: %s\n", v)
	}
	if len(violations) > 0 {
		fmt.Fprintf(out, "chaos: FAILED with %d violation(s); replay with --seed %d\n", len(violations), o.Seed)
		return violationsError{len(violations)}
	}
	fmt.Fprintln(out, "chaos: every invariant holds (0 violations)")
	return nil
}

// killLoop SIGKILLs a running replica of one of stages every
// o.KillInterval (taking the stages in turn, the replica at random) until
// o.Duration passed, o.MaxKills were made or ctx ends, and returns the
// number of kills. The supervisor of `podflow up` restarts each.
func killLoop(ctx context.Context, s *scenarioRun, children string, stages []string, rng *rand.Rand) int {
	kills, start := 0, time.Now()
	tick := time.NewTicker(s.o.KillInterval)
	defer tick.Stop()
	for time.Since(start) < s.o.Duration && (s.o.MaxKills <= 0 || kills < s.o.MaxKills) {
		select {
		case <-ctx.Done():
			return kills
		case <-tick.C:
		}
		stage := stages[kills%len(stages)]
		recs, err := plan.ReadRecords(children)
		if err != nil {
			s.say("no victim: %v", err)
			continue
		}
		var pool []plan.Record
		for _, r := range recs {
			if r.Role == "stage/"+stage && r.PID > 0 {
				pool = append(pool, r)
			}
		}
		if len(pool) == 0 {
			s.say("no running replica of %s to kill", stage)
			continue
		}
		v := pool[rng.IntN(len(pool))]
		if syscall.Kill(v.PID, syscall.SIGKILL) == nil {
			kills++
			s.say("SIGKILL %s (pid %d)", v.Name, v.PID)
		}
	}
	return kills
}

// watched is one version of an object a scenario follows, in the order of
// the store's revisions (podflow's resourceVersions are one counter for
// the whole store, as etcd's).
type watched struct {
	rv      int64
	deleted bool
	obj     runtime.Object
}

// recorder follows objects through watches that resume from their last
// resourceVersion (client-go's RetryWatcher) and keeps every version.
type recorder struct {
	mu   sync.Mutex
	evs  []watched
	seen []int64 // the last revision each watch delivered
	err  error
	wg   sync.WaitGroup
	stop context.CancelFunc
}

// watchFrom starts one watch per lister from resourceVersion rv.
func newRecorder(ctx context.Context, rv string, watchers ...cache.WatcherWithContext) (*recorder, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &recorder{stop: cancel, seen: make([]int64, len(watchers))}
	for i, w := range watchers {
		rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, w)
		if err != nil {
			cancel()
			r.wg.Wait()
			return nil, err
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer rw.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-rw.ResultChan():
					if !ok {
						r.fail(errors.New("a watch ended"))
						return
					}
					r.add(i, ev)
				}
			}
		}()
	}
	return r, nil
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

func (r *recorder) add(i int, ev watch.Event) {
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
	case watch.Error:
		r.fail(fmt.Errorf("watch error: %v", ev.Object))
		return
	default:
		return
	}
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		r.fail(err)
		return
	}
	rv, err := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	if err != nil {
		r.fail(fmt.Errorf("resourceVersion %q: %w", m.GetResourceVersion(), err))
		return
	}
	r.mu.Lock()
	r.evs = append(r.evs, watched{rv: rv, deleted: ev.Type == watch.Deleted, obj: ev.Object})
	r.seen[i] = max(r.seen[i], rv)
	r.mu.Unlock()
}

// fence waits until watch i delivered revision rv, written after
// everything the checks need: a watch delivers in revision order, so it
// then delivered every earlier version too.
func (r *recorder) fence(ctx context.Context, i int, rv string, limit time.Duration) error {
	want, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		return fmt.Errorf("resourceVersion %q: %w", rv, err)
	}
	_, err = poll(ctx, limit, func() (bool, string, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.seen[i] >= want, "", r.err
	})
	if err != nil {
		return fmt.Errorf("watch %d did not reach revision %d: %w", i, want, err)
	}
	return nil
}

// fenceWrite is a metadata-only write to an object (an annotation) whose
// resourceVersion a recorder then waits for (fence).
const fenceWrite = `{"metadata":{"annotations":{"chaos.podflow.io/fence":"%d"}}}`

// history stops the watches and returns what they saw, in revision order.
func (r *recorder) history() ([]watched, error) {
	r.stop()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := slices.Clone(r.evs)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].rv < evs[j].rv })
	return evs, r.err
}

// lw is a watch of one resource in one namespace with a label selector.
type lw func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)

func (f lw) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return f(ctx, o)
}

// recordSelected starts a recorder over the objects labelled sel: the
// pods and the kinds whose watches are given, from the revision of a list
// of the pods (so no version after it is missed).
func recordSelected(ctx context.Context, sel string, pods corev1client.PodInterface, watches ...lw) (*recorder, error) {
	l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	var ws []cache.WatcherWithContext
	for _, w := range append([]lw{pods.Watch}, watches...) {
		ws = append(ws, lw(func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return w(ctx, o)
		}))
	}
	return newRecorder(ctx, l.ResourceVersion, ws...)
}

// poll calls f every 500ms until it reports done, ctx ends or limit
// passes; it returns f's last description on a timeout.
func poll(ctx context.Context, limit time.Duration, f func() (bool, string, error)) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		done, last, err := f()
		if err != nil {
			return last, err
		}
		if done {
			return last, nil
		}
		if time.Now().After(deadline) {
			return last, context.DeadlineExceeded
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/podflow/podflow/ops/conformance/harness/report"
)

// errTestsFailed is returned when the run completed and a test failed.
var errTestsFailed = errors.New("conformance: tests failed")

type runOptions struct {
	podflow   string
	runtime   string
	nodes     int // real nodes of the Linux runtime (podflow up --linux-nodes)
	dataDir   string
	out       string
	suite     string
	kubectl   string
	images    imageInputs
	focus     string
	skip      string
	procs     int
	timeout   time.Duration
	slow      time.Duration
	grace     time.Duration
	upTimeout time.Duration
	// kubeconfig and registry run against a cluster already running
	// instead of starting podflow.
	kubeconfig string
	registry   string
}

func runRun(ctx context.Context, args []string) error {
	o := &runOptions{images: imageInputs{hostTools: hostTools}}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&o.podflow, "podflow", "bin/podflow", "the podflow binary")
	fs.StringVar(&o.runtime, "runtime", "linux", "podflow up --runtime: linux (real containers; root) or sim (API-only groups)")
	fs.IntVar(&o.nodes, "linux-nodes", 2, "with --runtime linux: real nodes on this machine (podflow up --linux-nodes); the suite's multi-node tests want two")
	fs.StringVar(&o.out, "out", "_output/conformance", "output directory: table, JUnit, logs (emptied first)")
	fs.StringVar(&o.dataDir, "data-dir", "", "podflow's data directory, removed first (default OUT/podflow)")
	fs.StringVar(&o.suite, "suite", ".tools/conformance/e2e.test", "the e2e test binary (ops/conformance/suite)")
	fs.StringVar(&o.kubectl, "kubectl", ".tools/conformance/kubectl", "kubectl of the suite's release, for the sig-cli tests")
	fs.StringVar(&o.images.agnhost, "agnhost", ".tools/conformance/agnhost", "static agnhost binary")
	fs.StringVar(&o.images.busybox, "busybox", "bin/busybox", "podflow's busybox binary (make busybox)")
	fs.StringVar(&o.images.nnp, "nnp", ".tools/conformance/nnp", "static nnp binary (test/images/nonewprivs)")
	fs.StringVar(&o.images.k8sDir, "k8s-dir", "", "k8s.io/kubernetes module directory (test image data files)")
	fs.StringVar(&o.images.sampleAPIServer, "sample-apiserver", "", "static sample-apiserver binary (k8s.io/sample-apiserver; with --etcd, the Aggregator test's images; none: left out)")
	fs.StringVar(&o.images.etcd, "etcd", "", "static etcd binary (go.etcd.io/etcd/server/v3), the Aggregator test's etcd image")
	fs.StringVar(&o.focus, "focus", `\[Conformance\]`, "ginkgo focus: a regular expression over the tests' full names")
	fs.StringVar(&o.skip, "skip", "", "ginkgo skip: a regular expression over the tests' full names")
	fs.IntVar(&o.procs, "procs", 8, "tests run at once ([Serial] tests run alone, after the others)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "per-test timeout (the suite's own setup included); ginkgo interrupts the test then and runs its cleanup")
	fs.DurationVar(&o.slow, "slow-timeout", 15*time.Minute, "per-test timeout of [Slow] tests (the suite's tag for tests that take more than 5 minutes)")
	fs.DurationVar(&o.grace, "grace", 30*time.Second, "time a timed-out test's cleanup has before its process is killed")
	fs.DurationVar(&o.upTimeout, "up-timeout", 5*time.Minute, "time podflow has to start")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "run against this running cluster instead of starting podflow")
	fs.StringVar(&o.registry, "registry", "", "with --kubeconfig: the registry (host:port) to push the e2e images to (none: images are not pushed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("run: unexpected arguments %q", fs.Args())
	}
	if o.runtime != "linux" && o.runtime != "sim" {
		return fmt.Errorf("run: --runtime %q: want linux or sim", o.runtime)
	}
	if o.nodes < 1 {
		return fmt.Errorf("run: --linux-nodes %d: want at least 1", o.nodes)
	}
	if o.procs < 1 || o.timeout <= 0 || o.slow <= 0 {
		return errors.New("run: --procs must be at least 1, --timeout and --slow-timeout positive")
	}
	if o.dataDir == "" {
		o.dataDir = filepath.Join(o.out, "podflow")
	}
	for _, p := range []*string{&o.podflow, &o.suite, &o.kubectl, &o.out, &o.dataDir, &o.images.agnhost, &o.images.busybox, &o.images.nnp, &o.images.sampleAPIServer, &o.images.etcd} {
		if *p == "" {
			continue // an optional image's program, not given
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	for _, f := range []string{o.suite, o.kubectl} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("run: %w (make conformance builds it)", err)
		}
	}
	start := time.Now()
	prev := previousDurations(filepath.Join(o.out, "junit.xml"))
	// Nothing of an earlier run may pass for this one's.
	for _, f := range []string{"results.txt", "causes.txt", "junit.xml", "specs.xml", "repo-list.yaml"} {
		if err := os.Remove(filepath.Join(o.out, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	for _, d := range []string{"logs", "junit"} {
		if err := os.RemoveAll(filepath.Join(o.out, d)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(o.out, d), 0o755); err != nil {
			return err
		}
	}

	kubeconfig, registry := o.kubeconfig, o.registry
	if kubeconfig == "" {
		pf, err := startPodflow(ctx, o)
		if err != nil {
			return err
		}
		defer pf.stop()
		kubeconfig, registry = pf.kubeconfig, pf.registry
	}
	env := append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if registry != "" {
		t0 := time.Now()
		rl := filepath.Join(o.out, "repo-list.yaml")
		if o.images.k8sDir == "" {
			return errors.New("run: --k8s-dir is required to build the images")
		}
		if err := pushImages(ctx, registry, o.images, rl); err != nil {
			return fmt.Errorf("run: push the e2e images: %w", err)
		}
		fmt.Printf("conformance: e2e images pushed to %s in %s (KUBE_TEST_REPO_LIST=%s)\n", registry, time.Since(t0).Round(100*time.Millisecond), rl)
		env = append(env, "KUBE_TEST_REPO_LIST="+rl)
	}

	specs, err := listSpecs(ctx, o, env)
	if err != nil {
		return err
	}
	if len(specs) == 0 {
		return fmt.Errorf("run: no test matches --focus %q --skip %q", o.focus, o.skip)
	}
	var parallel, serial []string
	for _, s := range specs {
		if strings.Contains(s, "[Serial]") || strings.Contains(s, "[Disruptive]") {
			serial = append(serial, s)
		} else {
			parallel = append(parallel, s)
		}
	}
	longestFirst(parallel, prev)
	longestFirst(serial, prev)
	fmt.Printf("conformance: %d tests (%d [Serial], run alone at the end), %d at a time, %s each at most ([Slow] %s); logs in %s\n",
		len(specs), len(serial), o.procs, o.timeout, o.slow, filepath.Join(o.out, "logs"))

	// A failure of the e2e framework's own setup fails every test the
	// same way: the run stops at the first and says why.
	ctx, abort := context.WithCancel(ctx)
	defer abort()
	r := &runner{o: o, env: env, kubeconfig: kubeconfig, total: len(specs), abort: abort}
	r.pool(ctx, parallel, o.procs)
	r.pool(ctx, serial, 1)
	if r.setupFailed != nil {
		report.Sort(r.results)
		if err := writeReports(o.out, r.results); err != nil {
			return err
		}
		return fmt.Errorf("run: the e2e framework's setup fails on this cluster, so every test would; stopped after %d tests: %s\n(log: %s)",
			len(r.results), r.setupFailed.Reason, filepath.Join(o.out, "logs", fileName(r.setupFailed.Name)+".log"))
	}
	if ctx.Err() != nil {
		fmt.Println("conformance: interrupted; reporting the tests that finished")
	}
	return r.finish(time.Since(start))
}

// previousDurations reads each test's run time from an earlier run's
// JUnit report; none when there is none.
func previousDurations(junit string) map[string]time.Duration {
	f, err := os.Open(junit)
	if err != nil {
		return nil
	}
	defer f.Close()
	rs, err := report.ParseJUnit(f)
	if err != nil {
		return nil
	}
	d := make(map[string]time.Duration, len(rs))
	for _, r := range rs {
		d[r.Name] = r.Duration
	}
	return d
}

// longestFirst orders names so that the longest tests start first, which
// shortens the run's tail: by an earlier run's durations, tests it did not
// run first, and among equals [Slow] tests first, then by name.
func longestFirst(names []string, prev map[string]time.Duration) {
	key := func(n string) time.Duration {
		d, ok := prev[n]
		if !ok {
			d = 1 << 62
		}
		return d
	}
	slices.SortStableFunc(names, func(a, b string) int {
		if c := cmp.Compare(key(b), key(a)); c != 0 {
			return c
		}
		if sa, sb := strings.Contains(a, "[Slow]"), strings.Contains(b, "[Slow]"); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
}

// listSpecs returns the full names of the tests that --focus and --skip
// select, from a dry run of the suite.
func listSpecs(ctx context.Context, o *runOptions, env []string) ([]string, error) {
	f := filepath.Join(o.out, "specs.xml")
	args := []string{"--ginkgo.dry-run", "--ginkgo.focus=" + o.focus, "--podflow.junit-ran=" + f}
	if o.skip != "" {
		args = append(args, "--ginkgo.skip="+o.skip)
	}
	cmd := exec.CommandContext(ctx, o.suite, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("run: list the tests (%s --ginkgo.dry-run): %w\n%s", o.suite, err, tail(out.Bytes(), 20))
	}
	rf, err := os.Open(f)
	if err != nil {
		return nil, err
	}
	defer rf.Close()
	rs, err := report.ParseJUnit(rf)
	if errors.Is(err, report.ErrNoTests) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(rs))
	for _, r := range rs {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

type runner struct {
	o          *runOptions
	env        []string
	kubeconfig string
	total      int
	abort      context.CancelFunc

	mu          sync.Mutex
	setupFailed *report.Result // the first result that failed in the suite's setup
	n           int
	results     []report.Result
}

// pool runs names, procs at a time, until done or ctx is cancelled.
func (r *runner) pool(ctx context.Context, names []string, procs int) {
	work := make(chan string)
	var wg sync.WaitGroup
	for range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				res := r.runOne(ctx, name)
				r.record(res)
			}
		}()
	}
	for _, n := range names {
		select {
		case work <- n:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
}

func (r *runner) record(res report.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.results = append(r.results, res)
	if strings.HasPrefix(res.Reason, suiteSetup) && r.setupFailed == nil {
		r.setupFailed = &res
		r.abort()
	}
	line := res.Reason
	if line != "" {
		line = "\n      " + line
	}
	fmt.Printf("[%d/%d] %-11s %6s  %s%s\n", r.n, r.total, res.State, res.Duration.Round(time.Second), res.Name, line)
}

// suiteSetup is the node that failed when the e2e framework's setup
// failed: resultOf names it before the reason.
const suiteSetup = "[SynchronizedBeforeSuite]"

// suiteDescription is the description the e2e suite runs its specs
// under (test/e2e.RunE2ETests); ginkgo matches --focus against it and the
// spec's full text joined by a space.
const suiteDescription = "Kubernetes e2e suite"

var unsafeRE = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// fileName is a short file name for a test's log and report.
func fileName(name string) string {
	s := strings.Trim(unsafeRE.ReplaceAllString(name, "_"), "_")
	if len(s) > 150 { // keep long names apart by a hash of the whole
		s = fmt.Sprintf("%s-%x", s[:140], sha256.Sum256([]byte(name)))[:150]
	}
	return s
}

// waitsOutPodStart are tests not tagged [Slow] that take the suite's whole
// pod start timeout (5 minutes) by design, on any cluster: the
// SchedulerPredicates hostPort conflict test waits that long for its
// unschedulable pod5 to leave Pending (createHostPortPodOnNode:
// e2epod.WaitForPodNotPending, its error ignored), so the default
// per-test timeout always interrupts it first.
var waitsOutPodStart = []string{
	"[sig-scheduling] SchedulerPredicates [Serial] validates that there exists conflict between pods with same hostPort and protocol but one using 0.0.0.0 hostIP [Conformance]",
}

// waitsOutBackOff are tests not tagged [Slow] whose own waits are longer
// than the default per-test timeout by design. "monotonically increasing
// restart count" waits for five restarts through kubelet's crash-loop
// back-off (10 s doubling): the fifth comes about six and a half minutes
// after the pod starts, within the test's own 14-minute budget (2 min of
// back-off, 4 min of observation, 2 min per restart).
var waitsOutBackOff = []string{
	"[sig-node] Probing container should have monotonically increasing restart count [NodeConformance] [Conformance]",
}

// testTimeout is the per-test timeout of the test name: slow for [Slow]
// tests and those that wait out the pod start timeout or kubelet's
// back-off, else timeout.
func testTimeout(name string, timeout, slow time.Duration) time.Duration {
	if strings.Contains(name, "[Slow]") || slices.Contains(waitsOutPodStart, name) || slices.Contains(waitsOutBackOff, name) {
		return slow
	}
	return timeout
}

// runOne runs one test in its own process of the suite: ginkgo
// interrupts it at the timeout and runs its cleanup; the process is
// killed if it is still there after the grace period.
func (r *runner) runOne(ctx context.Context, name string) report.Result {
	timeout := testTimeout(name, r.o.timeout, r.o.slow)
	base := fileName(name)
	junit := filepath.Join(r.o.out, "junit", base+".xml")
	logf := filepath.Join(r.o.out, "logs", base+".log")
	args := []string{
		"--kubeconfig=" + r.kubeconfig,
		"--kubectl-path=" + r.o.kubectl,
		"--ginkgo.focus=^" + regexp.QuoteMeta(suiteDescription+" "+name) + "$",
		"--ginkgo.timeout=" + timeout.String(),
		"--ginkgo.grace-period=" + r.o.grace.String(),
		"--ginkgo.no-color",
		"--ginkgo.v",
		"--podflow.junit-ran=" + junit,
	}
	res := report.Result{Name: name, SIG: report.SIGOf(name)}
	lf, err := os.Create(logf)
	if err != nil {
		res.State, res.Reason = report.NoReport, err.Error()
		return res
	}
	defer lf.Close()
	cmd := exec.Command(r.o.suite, args...)
	cmd.Env = r.env
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		res.State, res.Reason = report.NoReport, err.Error()
		return res
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	hard := time.NewTimer(timeout + r.o.grace + time.Minute)
	defer hard.Stop()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-hard.C:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		waitErr = <-done
		fmt.Fprintf(lf, "\nconformance: killed after %s\n", time.Since(t0).Round(time.Second))
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) // ginkgo runs the cleanup
		select {
		case waitErr = <-done:
		case <-time.After(r.o.grace + 10*time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			waitErr = <-done
		}
	}
	elapsed := time.Since(t0)
	return resultOf(name, junit, logf, elapsed, waitErr)
}

// resultOf reads a test's result from its process's report: the test's
// own entry, or a failed suite node that kept it from running, or, when
// there is no report, the end of its log.
func resultOf(name, junit, logf string, elapsed time.Duration, waitErr error) report.Result {
	res := report.Result{Name: name, SIG: report.SIGOf(name), Duration: elapsed}
	f, err := os.Open(junit)
	if err == nil {
		rs, perr := report.ParseJUnit(f)
		f.Close()
		var suiteFail *report.Result
		for i := range rs {
			if rs[i].Name == name {
				rs[i].SIG = res.SIG
				return rs[i]
			}
			if rs[i].Failed() && suiteFail == nil {
				suiteFail = &rs[i]
			}
		}
		if suiteFail != nil {
			res.State = suiteFail.State
			res.Reason = report.OneLine(suiteFail.Name + ": " + suiteFail.Reason)
			res.Detail = suiteFail.Detail
			return res
		}
		if perr != nil && !errors.Is(perr, report.ErrNoTests) {
			err = perr
		}
	}
	res.State = report.NoReport
	b, _ := os.ReadFile(logf)
	res.Reason = noReportReason(string(b), waitErr)
	return res
}

var (
	ansiRE = regexp.MustCompile("\x1b\\[[0-9;]*m")
	// klogRE is a klog line: "I1206 02:20:58.037 21418 chunking.go:66] msg".
	klogRE = regexp.MustCompile(`(?m)^\s*[IWEF]\d{4} [0-9:.]+\s+\d+ [\w.-]+:\d+\] (.+)$`)
)

// noReportReason explains a test process that wrote no report from its
// log: a panic outside ginkgo's reach (an assertion in a goroutine of
// the test) is named with the last thing the test logged before it.
func noReportReason(log string, waitErr error) string {
	log = ansiRE.ReplaceAllString(log, "")
	if i := strings.Index(log, "Observed a panic"); i >= 0 {
		for _, m := range slices.Backward(klogRE.FindAllStringSubmatch(log[:i], -1)) {
			if msg := strings.TrimSpace(m[1]); len(msg) > 2 {
				return report.OneLine(fmt.Sprintf("panicked outside ginkgo (%v) after: %s", waitErr, msg))
			}
		}
	}
	return report.OneLine(fmt.Sprintf("no report (%v): %s", waitErr, tail([]byte(log), 1)))
}

// tail returns the last n non-empty lines of b.
func tail(b []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			lines = append(lines, sc.Text())
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// finish writes the merged JUnit report, the table and the causes, and
// prints the table and totals.
func (r *runner) finish(took time.Duration) error {
	rs := r.results
	report.Sort(rs)
	if err := writeReports(r.o.out, rs); err != nil {
		return err
	}
	fmt.Println()
	if err := report.WriteTable(os.Stdout, rs); err != nil {
		return err
	}
	fmt.Printf("\nconformance: %d tests in %s; table, causes and JUnit in %s\n", len(rs), took.Round(time.Second), r.o.out)
	if len(rs) < r.total {
		fmt.Printf("conformance: %d of %d tests did not run (interrupted)\n", r.total-len(rs), r.total)
		return errTestsFailed
	}
	for _, x := range rs {
		if x.Failed() {
			return errTestsFailed
		}
	}
	return nil
}

// writeReports writes OUT/junit.xml, OUT/results.txt (the table) and
// OUT/causes.txt.
func writeReports(out string, rs []report.Result) error {
	write := func(name string, fn func(io.Writer) error) error {
		f, err := os.Create(filepath.Join(out, name))
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return errors.Join(
		write("junit.xml", func(w io.Writer) error { return report.WriteJUnit(w, "Kubernetes e2e suite (podflow conformance)", rs) }),
		write("results.txt", func(w io.Writer) error { return report.WriteTable(w, rs) }),
		write("causes.txt", func(w io.Writer) error { return report.WriteCauses(w, report.Causes(rs)) }),
	)
}

// runReport rebuilds the table from OUT/junit/*.xml (or the files named).
func runReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	out := fs.String("out", "_output/conformance", "the run's output directory")
	causes := fs.Bool("causes", false, "print the failures grouped by cause after the table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	files := fs.Args()
	if len(files) == 0 {
		var err error
		if files, err = filepath.Glob(filepath.Join(*out, "junit", "*.xml")); err != nil {
			return err
		}
	}
	var rs []report.Result
	for _, fn := range files {
		f, err := os.Open(fn)
		if err != nil {
			return err
		}
		got, err := report.ParseJUnit(f)
		f.Close()
		if err != nil && !errors.Is(err, report.ErrNoTests) {
			return fmt.Errorf("%s: %w", fn, err)
		}
		rs = append(rs, got...)
	}
	report.Sort(rs)
	if err := report.WriteTable(os.Stdout, rs); err != nil {
		return err
	}
	if *causes {
		fmt.Println()
		return report.WriteCauses(os.Stdout, report.Causes(rs))
	}
	return nil
}

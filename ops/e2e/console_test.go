package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/podflow/podflow/ops/console"
	"github.com/podflow/podflow/services/pipeline"
)

// consoleURL is the console address `podflow up` printed.
func consoleURL(t *testing.T, c *cluster) string {
	t.Helper()
	m := regexp.MustCompile(`up: console: (http://\S+/)`).FindStringSubmatch(c.output())
	if m == nil {
		t.Fatalf("up printed no console address:\n%s", c.output())
	}
	return m[1]
}

// TestConsoleEvents reads the console's event stream as a program would:
// refused without a token, a snapshot of every stage and node with one.
func TestConsoleEvents(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t)
	url := consoleURL(t, c)
	resp, err := http.Get(url + "api/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"api/events", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var snap console.Snapshot
		if err := json.Unmarshal([]byte(data), &snap); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range snap.Stages {
			names = append(names, s.Name)
			if s.Replicas < 1 {
				t.Errorf("stage %s: no replica answering", s.Name)
			}
		}
		for _, s := range pipeline.Stages {
			if !slices.Contains(names, s) {
				t.Errorf("stage %s missing from %v", s, names)
			}
		}
		if len(snap.Nodes) != 3 || snap.Nodes[0].Ready != "Ready" {
			t.Errorf("nodes: %+v", snap.Nodes)
		}
		return
	}
	t.Fatalf("no snapshot: %v", sc.Err())
}

// TestConsoleTimeline starts a console after the events happened: pods
// published and a stage replica killed before it ran. Its timeline
// (/api/timeline), read from the events stream, counts every one of them
// and marks the kill and the restart.
func TestConsoleTimeline(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t)
	const n = 12
	c.mustPodflow("publish", "-f", writeTemp(t, pod("tl", "default", "tl", "", "")), "--count", fmt.Sprint(n))
	eventually(t, 60*time.Second, "the pods Running", func() (bool, string) {
		running, total := c.runningPods("tl-")
		return running == n, fmt.Sprintf("%d of %d Running", running, total)
	})
	var victim childRecord
	for _, k := range c.children() {
		if k.Role == "stage/"+pipeline.Persistence {
			victim = k
		}
	}
	if victim.PID == 0 {
		t.Fatalf("no persistence replica among %+v", c.children())
	}
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the replica restarted", func() (bool, string) {
		for _, k := range c.children() {
			if k.Name == victim.Name && k.PID != 0 && k.PID != victim.PID {
				return true, ""
			}
		}
		return false, "not yet"
	})

	// A console of its own, started now.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "console", "--config", c.config, "--listen", "127.0.0.1:0")
	cmd.Dir = repoRoot
	out := &lockedBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	var url string
	eventually(t, 20*time.Second, "the console's address", func() (bool, string) {
		m := regexp.MustCompile(`console: (http://\S+/)`).FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil, out.String()
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"api/timeline?range=5m", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h console.History
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%d: %v", resp.StatusCode, err)
	}
	got := map[string]int{}
	for _, b := range h.Buckets {
		for st, types := range b.Counts {
			for typ, k := range types {
				got[st+"/"+typ] += k
			}
		}
	}
	// What the stream holds, counted message by message.
	for _, x := range []struct{ stage, typ string }{{pipeline.Admission, "PodAdmitted"}, {pipeline.Persistence, "PodPersisted"}, {pipeline.Scheduler, "PodScheduled"}} {
		want := 0
		for _, k := range c.streamCounts(x.typ, "") {
			want += k
		}
		if want < n || got[x.stage+"/"+x.typ] != want {
			t.Errorf("%s/%s: the timeline counts %d, the stream holds %d (at least %d published)", x.stage, x.typ, got[x.stage+"/"+x.typ], want, n)
		}
	}
	var marks []string
	for _, m := range h.Marks {
		if m.Process == victim.Name {
			marks = append(marks, m.Kind)
		}
	}
	if fmt.Sprint(marks) != "[killed restarted]" {
		t.Errorf("marks of %s: %v, want [killed restarted]; all: %+v", victim.Name, marks, h.Marks)
	}
	t.Logf("%d events in %d buckets of %ds, %d marks", h.Events, len(h.Buckets), h.StepSec, len(h.Marks))
}

// TestConsoleBrowser drives the web console of `podflow up` in headless
// Chromium: the page loads behind its login, shows every stage, a pod
// created with kubectl appears and moves to Running, a pod with an
// unsatisfiable nodeSelector shows as stuck in the scheduler with
// FailedScheduling, and a pod's waterfall lists its stages in order.
// (TestConsoleInBrowser in ops/console drives it over 20,000 pods and
// takes the docs' screenshots.)
func TestConsoleBrowser(t *testing.T) {
	parallel(t, simulated)
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not on the PATH: the console's browser test drives headless Chromium (Debian package chromium; `make deps-os` installs it)")
	}
	c := startCluster(t)
	url := consoleURL(t, c)
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1500, 1100),
		// Chromium prints its DevTools address once started; chromedp's
		// default wait for it is 20 s, which a loaded 2-core machine (make
		// test runs nodeagent/linux beside this package) can exceed. The
		// test's own deadline (3 minutes, below) bounds the launch instead.
		chromedp.WSURLReadTimeout(time.Minute))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// poll evaluates js until it returns true.
	poll := func(what, js string, limit time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			var ok bool
			if err := chromedp.Run(ctx, chromedp.Evaluate(js, &ok)); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if ok {
				return time.Since(start)
			}
			if time.Since(start) > limit {
				var page string
				_ = chromedp.Run(ctx, chromedp.Evaluate(`document.querySelector("main") ? document.querySelector("main").innerText : document.body.innerText`, &page))
				t.Fatalf("%s: not within %s; the page shows:\n%s", what, limit, page)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	run("log in", chromedp.Navigate(url), chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", c.token, chromedp.ByID), chromedp.Submit("#token", chromedp.ByID))
	poll("the pipeline", `!!document.querySelector('.stage[data-stage="api"]')`, 20*time.Second)

	t.Run("every stage", func(t *testing.T) {
		var shown []string
		run("stages", chromedp.Evaluate(`Array.from(document.querySelectorAll("#pipeline .stage")).map(e => e.dataset.stage)`, &shown))
		at := -1
		for _, s := range pipeline.Stages {
			i := slices.Index(shown, s)
			if i < 0 || i < at {
				t.Fatalf("stage %s missing or out of lifecycle order in %v", s, shown)
			}
			at = i
		}
		if !slices.ContainsFunc(shown, func(s string) bool { return len(s) > 9 && s[:9] == "nodeagent" }) {
			t.Fatalf("no node agent in %v", shown)
		}
	})

	t.Run("a pod appears and reaches Running", func(t *testing.T) {
		k.must("apply", "-f", writeTemp(t, pod("console-web", "default", "console", "", "")))
		took := poll("the pod appears", `!!document.querySelector('#pods tr[data-pod="default/console-web"]')`, 2*time.Second)
		t.Logf("the pod appeared in the console %s after kubectl returned", took.Round(time.Millisecond))
		poll("the pod runs", `(() => { const r = document.querySelector('#pods tr[data-pod="default/console-web"]');
			return !!r && r.querySelector("td.phase").textContent === "Running"; })()`, 60*time.Second)
	})

	t.Run("an unschedulable pod is stuck in the scheduler", func(t *testing.T) {
		k.must("apply", "-f", writeTemp(t, pod("console-nowhere", "default", "nowhere", "", "  nodeSelector: {disk: none-such}\n")))
		poll("FailedScheduling shown", `(() => { const r = document.querySelector('#pods tr[data-pod="default/console-nowhere"]');
			return !!r && r.classList.contains("stuck") && r.querySelector("td.stage").textContent === "scheduler"
				&& r.querySelector("td.reason").textContent === "FailedScheduling"; })()`, 30*time.Second)
		var first string
		run("stuck first", chromedp.Evaluate(`document.querySelector("#pods tbody tr").dataset.pod`, &first))
		if first != "default/console-nowhere" {
			t.Fatalf("the first row is %s, want the stuck pod", first)
		}
	})

	t.Run("the waterfall lists the stages in order", func(t *testing.T) {
		run("select the pod", chromedp.Click(`#pods tr[data-pod="default/console-web"]`, chromedp.ByQuery))
		poll("the waterfall", `document.querySelectorAll("#journey .wf-row").length >= 5 &&
			Array.from(document.querySelectorAll("#journey .wf-row")).some(r => r.dataset.stage === "nodeagent")`, 15*time.Second)
		var stages []string
		run("rows", chromedp.Evaluate(`Array.from(document.querySelectorAll("#journey .wf-row")).map(r => r.dataset.stage)`, &stages))
		at := -1
		for _, s := range []string{pipeline.API, pipeline.Admission, pipeline.Persistence, pipeline.Scheduler, "nodeagent"} {
			i := slices.Index(stages, s)
			if i < 0 || i < at {
				t.Fatalf("stage %s missing or out of order in the waterfall %v", s, stages)
			}
			at = i
		}
	})

	t.Run("chaos kills show on the timeline", func(t *testing.T) {
		out, code := c.podflowTimeout(3*time.Minute, "chaos", "--config", c.config, "--pods", "100", "--duration", "9s",
			"--kill-interval", "3s", "--targets", "stages", "--seed", "7")
		if code != 0 {
			t.Fatalf("chaos exit %d:\n%s", code, out)
		}
		poll("a restart mark", `document.querySelectorAll("#timeline line.m-restarted").length > 0`, 10*time.Second)
		var marks string
		run("marks", chromedp.Evaluate(`document.querySelector("#marks").textContent`, &marks))
		t.Logf("marks: %s", marks)
	})
}

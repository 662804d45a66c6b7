package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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

// TestConsoleBrowser drives the web console of `podflow up` in headless
// Chromium: the page loads behind its login, shows every stage, a pod
// created with kubectl appears and moves to Running, a pod with an
// unsatisfiable nodeSelector shows as stuck in the scheduler with
// FailedScheduling, and a pod's waterfall lists its stages in order.
// (TestConsoleInBrowser in ops/console drives it over 20,000 pods and
// takes the docs' screenshots.)
func TestConsoleBrowser(t *testing.T) {
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

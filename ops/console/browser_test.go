package console

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/podflow/podflow/ops/trace"
)

// bigSource is a system of 20,000 pods on 100 nodes: admission backs up,
// one pod is stuck in the scheduler.
type bigSource struct{}

func (bigSource) Snapshot(context.Context) *Snapshot {
	s := bigSnapshot(20000, time.Now())
	s.Stages[1].Pending, s.Stages[1].BackingUp = 500, true
	return s
}

func (bigSource) Journey(_ context.Context, ns, name string) (*Journey, error) {
	t0 := time.Now().Add(-time.Minute)
	return &Journey{Timeline: &trace.Timeline{Namespace: ns, Name: name, Where: "scheduler", Verdict: "Pending: FailedScheduling: 0/100 nodes are available",
		Entries: []trace.Entry{{Time: t0, Stage: "api", Event: "PodAuthorized"}, {Time: t0.Add(time.Second), Stage: "scheduler", Event: "PodUnschedulable", Repeats: 5}}},
		Events: []PodEvent{}}, nil
}

// History is a stream's history over q: every bucket counts admission's
// and the scheduler's events; the scheduler was killed a third of the
// way in and restarted a second later.
func (bigSource) History(_ context.Context, q HistoryQuery) (*History, error) {
	h := newHistogram(q)
	for i, b := range h.buckets {
		for range i%5 + 1 {
			h.add(b.Start, "admission", "PodAdmitted", 2*time.Millisecond)
		}
		h.add(b.Start, "scheduler", "PodScheduled", 30*time.Millisecond)
	}
	out := h.history()
	kill := q.From.Add(q.To.Sub(q.From) / 3)
	out.Marks = []Mark{{Time: kill, Kind: "killed", Process: "scheduler-1", Detail: "killed"},
		{Time: kill.Add(time.Second), Kind: "restarted", Process: "scheduler-1"}}
	return out, nil
}

// TestConsoleInBrowser drives the console in headless Chromium over
// 20,000 pods: it logs in by the one-time link, finds a pod by search,
// opens a pod's journey by its address, drills into the stage a stuck
// pod waits in, shows the stage that backs up, and fits a 1,280 px
// window. CONSOLE_SCREENSHOTS=DIR (make console-screenshots) writes the
// docs' pictures there.
func TestConsoleInBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not on the PATH: the console's browser test drives headless Chromium (Debian package chromium; `make deps-os` installs it)")
	}
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(testToken+",admin,admin,\"system:masters\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hub := NewHub(bigSource{}, time.Second)
	hctx, stopHub := context.WithCancel(context.Background())
	hubDone := make(chan struct{})
	go func() { hub.Run(hctx); close(hubDone) }()
	defer func() { stopHub(); <-hubDone }()
	links := NewLoginLinks(time.Minute)
	code, err := links.New(testToken)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer((&Server{Hub: hub, Src: bigSource{}, Allow: TokenFile(tokens), Links: links}).Handler())
	defer srv.Close()

	// chromedp gives Chromium a fresh user data directory of its own and
	// removes it once the browser has exited.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1280, 1000), chromedp.WSURLReadTimeout(time.Minute))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// poll asks js until it is true. An evaluation that fails because the
	// page is navigating is asked again: the login link's page moves on
	// to the console by a meta refresh, after Navigate has returned, and
	// an evaluation meeting that navigation fails with "Inspected target
	// navigated or closed". Any other failure ends the test.
	poll := func(what, js string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var ok bool
			err := chromedp.Run(ctx, chromedp.Evaluate(js, &ok))
			switch {
			case err == nil && ok:
				return
			case err != nil && (!navigating(err) || time.Now().After(deadline)):
				t.Fatalf("%s: %v", what, err)
			case time.Now().After(deadline):
				var page string
				_ = chromedp.Run(ctx, chromedp.Evaluate(`document.body.innerText`, &page))
				t.Fatalf("%s: not within 20s; the page shows:\n%s", what, page)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The link's address is 127.0.0.1: the console answers loopback names only.
	base := strings.Replace(srv.URL, "localhost", "127.0.0.1", 1)
	run("log in by the one-time link", chromedp.Navigate(base+"/login?code="+code))
	poll("the pipeline", `!!document.querySelector('.stage[data-stage="api"]')`)
	poll("the first page of pods", `document.querySelectorAll("#pods tbody tr").length === 100 && /of 20000/.test(document.querySelector("#pods-count").textContent)`)

	t.Run("find a pod among 20,000", func(t *testing.T) {
		run("search", chromedp.SendKeys("#filter", "pod-12345", chromedp.ByID))
		poll("the pod found", `document.querySelectorAll("#pods tbody tr").length === 1 && !!document.querySelector('#pods tr[data-pod="ns-5/pod-12345"]')`)
		poll("the search in the address", `location.hash.includes("q=pod-12345")`)
	})

	t.Run("a pod's journey by its address", func(t *testing.T) {
		run("open the link", chromedp.Navigate(base+"/#pod=ns-7/pod-00007"))
		poll("the journey", `document.querySelector("#journey-title").textContent.startsWith("ns-7/pod-00007") && document.querySelectorAll("#journey .wf-row").length === 2`)
		poll("retries folded", `/×5/.test(document.querySelector("#journey").textContent)`)
	})

	t.Run("the stuck pod in its stage", func(t *testing.T) {
		poll("the count on the card", `/1 stuck here/.test(document.querySelector('.stage[data-stage="scheduler"]').textContent)`)
		run("drill into the scheduler", chromedp.Click(`.stage[data-stage="scheduler"]`, chromedp.ByQuery))
		poll("its pods", `document.querySelectorAll("#pods tbody tr").length === 1 && document.querySelector("#pods tbody tr").classList.contains("stuck")
			&& document.querySelector("#pods tbody tr td.reason").textContent === "FailedScheduling" && location.hash.includes("stage=scheduler")`)
	})

	t.Run("the backlog", func(t *testing.T) {
		poll("admission backs up", `document.querySelector('.stage[data-stage="admission"]').classList.contains("backing")`)
	})

	t.Run("the timeline's axes, range and marks", func(t *testing.T) {
		run("the default view", chromedp.Navigate(base+"/"))
		poll("bars on a time axis and a count axis", `document.querySelectorAll("#timeline g.bucket").length >= 90 &&
			document.querySelectorAll("#timeline text.tick").length >= 6 &&
			Array.from(document.querySelectorAll("#timeline text.tick")).some(e => e.textContent === "0") &&
			document.querySelector("#tl-step").textContent === "10 s" && document.querySelector("#range").value === "15m"`)
		poll("the kill and the restart", `document.querySelectorAll("#timeline line.m-killed").length === 1 &&
			document.querySelectorAll("#timeline line.m-restarted").length === 1 && /scheduler-1 killed/.test(document.querySelector("#marks").textContent)`)
		run("an hour", chromedp.SetValue("#range", "1h", chromedp.ByID),
			chromedp.Evaluate(`document.querySelector("#range").dispatchEvent(new Event("change"))`, nil))
		poll("the hour in minutes, in the address", `document.querySelector("#tl-step").textContent === "1 min" && location.hash.includes("range=1h") &&
			document.querySelectorAll("#timeline g.bucket").length >= 60`)
		run("reload", chromedp.Reload())
		poll("the range kept", `document.querySelector("#range").value === "1h" && document.querySelector("#tl-step").textContent === "1 min"`)
		run("back to the default", chromedp.Navigate(base+"/"))
	})

	t.Run("fits 1280 px", func(t *testing.T) {
		poll("no horizontal scrolling", `document.documentElement.scrollWidth <= window.innerWidth &&
			Array.from(document.querySelectorAll("#pipeline .stage")).every(e => e.getBoundingClientRect().right <= window.innerWidth)`)
	})

	if out := os.Getenv("CONSOLE_SCREENSHOTS"); out != "" {
		run("a stuck pod", chromedp.Navigate(base+"/#stage=scheduler&pod=ns-0/pod-00000"))
		poll("its journey", `document.querySelectorAll("#journey .wf-row").length === 2`)
		for _, v := range []struct{ file, sel string }{
			{"console-pipeline.png", "#pipeline-view"}, {"console-pods.png", "#pods-view"}, {"console-journey.png", "#journey-view"},
		} {
			var png []byte
			run("screenshot "+v.file, chromedp.Screenshot(v.sel, &png, chromedp.ByQuery))
			if err := os.WriteFile(filepath.Join(out, v.file), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("console screenshots written to %s", out)
	}
}

// navigating reports whether err is Chromium's answer to an evaluation
// that met a navigation of the page: its execution context went away.
func navigating(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Inspected target navigated or closed") || strings.Contains(msg, "Execution context was destroyed") ||
		strings.Contains(msg, "Cannot find context with specified id")
}

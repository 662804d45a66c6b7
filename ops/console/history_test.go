package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

func TestParseHistoryQuery(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 7, 33, 0, time.UTC)
	for _, tc := range []struct {
		name           string
		args           map[string]string
		from, to, step string // want; from and to as 15:04:05
		err            string
	}{
		{name: "the last 15 minutes by default", from: "11:52:30", to: "12:07:33", step: "10s"},
		{name: "an hour", args: map[string]string{"range": "1h"}, from: "11:07:00", to: "12:07:33", step: "1m0s"},
		{name: "a day", args: map[string]string{"range": "24h"}, from: "12:00:00", to: "12:07:33", step: "30m0s"},
		{name: "from and to", args: map[string]string{"from": "2026-05-01T12:00:00Z", "to": "1777637100"}, from: "12:00:00", to: "12:05:00", step: "5s"},
		{name: "a step asked for", args: map[string]string{"range": "5m", "step": "1s"}, from: "12:02:33", to: "12:07:33", step: "1s"},
		{name: "not a duration", args: map[string]string{"range": "soon"}, err: `range must be a positive duration such as 15m, got "soon"`},
		{name: "a negative range", args: map[string]string{"range": "-5m"}, err: "range must be a positive duration"},
		{name: "range and from", args: map[string]string{"range": "5m", "from": "1777636800"}, err: "give range or from, not both"},
		{name: "from after to", args: map[string]string{"from": "2026-05-01T12:10:00Z"}, err: "must be before to"},
		{name: "a bad time", args: map[string]string{"to": "yesterday"}, err: `to must be RFC 3339 or Unix seconds, got "yesterday"`},
		{name: "too long a range", args: map[string]string{"range": "200h"}, err: "may be at most 168h0m0s"},
		{name: "a fraction of a second", args: map[string]string{"step": "500ms"}, err: "step must be a whole number of seconds"},
		{name: "too many buckets", args: map[string]string{"range": "1h", "step": "1s"}, err: "is 3600 buckets, at most 600: widen the step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := ParseHistoryQuery(func(k string) string { return tc.args[k] }, now)
			if tc.err != "" {
				if err == nil || !errors.Is(err, ErrHistoryQuery) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprint(q.From.UTC().Format("15:04:05"), " ", q.To.UTC().Format("15:04:05"), " ", q.Step)
			if want := fmt.Sprint(tc.from, " ", tc.to, " ", tc.step); got != want {
				t.Fatalf("got %s, want %s", got, want)
			}
		})
	}
}

// publishEvents publishes events of the kinds a pod's life has, as the
// stages would, and returns how many messages it published.
func publishEvents(t *testing.T, ctx context.Context, conn *bus.Conn, prefix string, pods int) int {
	t.Helper()
	n := 0
	pub := func(e *eventsv1.Envelope, id, pod, stage string, took time.Duration) {
		t.Helper()
		e.Id, e.PodUid, e.Namespace, e.PodName, e.NodeName, e.Stage = id, "uid-"+pod, "default", pod, "n1", stage
		e.Time = timestamppb.Now()
		if took > 0 {
			start := time.Now().Add(-took)
			e.HandledStart, e.HandledEnd = timestamppb.New(start), timestamppb.New(start.Add(took))
		}
		if _, err := conn.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
		n++
	}
	for i := range pods {
		pod := fmt.Sprintf("%s%d", prefix, i)
		adm, _ := bus.NewEnvelope(&eventsv1.PodAdmitted{})
		pub(adm, pod+"/adm", pod, "admission", 2*time.Millisecond)
		if i%2 == 0 {
			sch, _ := bus.NewEnvelope(&eventsv1.PodScheduled{NodeName: "n1"})
			pub(sch, pod+"/sch", pod, "scheduler", 30*time.Millisecond)
		}
		if i%4 == 0 {
			sandbox, _ := bus.NewEnvelope(&eventsv1.PodSandboxReady{})
			running, _ := bus.NewEnvelope(&eventsv1.PodRunning{PodIp: "10.244.0.9"})
			report, _ := bus.NewEnvelope(&eventsv1.PodStatusReport{Seq: 1, Steps: []*eventsv1.Envelope{
				{Id: pod + "/sb", Payload: sandbox.Payload}, {Id: pod + "/run", Payload: running.Payload}}})
			pub(report, pod+"/report", pod, "nodeagent", 0)
		}
	}
	return n
}

// TestReadHistory reads the history of a real events stream: a console
// that starts after the events sees them, counted exactly, in the bucket
// of the time the stream stored them, and nothing outside the range.
func TestReadHistory(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "admin")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	js := conn.JetStream()

	publishEvents(t, ctx, conn, "before-", 3) // before the range
	time.Sleep(20 * time.Millisecond)
	from := time.Now()
	msgs := publishEvents(t, ctx, conn, "in-", 8)
	time.Sleep(20 * time.Millisecond)
	to := time.Now()
	publishEvents(t, ctx, conn, "after-", 5) // after it

	t.Run("one bucket", func(t *testing.T) {
		h, err := ReadHistory(ctx, js, HistoryQuery{From: from, To: to, Step: time.Hour}, HistoryLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Buckets) != 1 {
			t.Fatalf("%d buckets, want 1", len(h.Buckets))
		}
		b := h.Buckets[0]
		want := map[string]map[string]int{
			"admission": {"PodAdmitted": 8},
			"scheduler": {"PodScheduled": 4},
			"nodeagent": {"PodSandboxReady": 2, "PodRunning": 2}, // a report counts as its steps
		}
		if g, w := fmt.Sprint(b.Counts), fmt.Sprint(want); g != w {
			t.Fatalf("counts %s, want %s", g, w)
		}
		if b.Total != 16 || h.Events != 16 || h.Truncated {
			t.Fatalf("total %d, events %d, truncated %v; want 16, 16, false", b.Total, h.Events, h.Truncated)
		}
		if fmt.Sprint(h.Stages) != "[admission nodeagent scheduler]" || fmt.Sprint(h.Types) != "[PodAdmitted PodRunning PodSandboxReady PodScheduled]" {
			t.Fatalf("stages %v, types %v", h.Stages, h.Types)
		}
		adm, sch := b.Latency["admission"], b.Latency["scheduler"]
		if adm.N != 8 || adm.P50Ms < 2 || adm.P50Ms > 2.4 || adm.P99Ms < 2 || adm.P99Ms > 2.4 {
			t.Fatalf("admission's handling time %+v, want 8 of 2 ms (within 19%%)", adm)
		}
		if sch.N != 4 || sch.P50Ms < 30 || sch.P50Ms > 36 {
			t.Fatalf("scheduler's handling time %+v, want 4 of 30 ms", sch)
		}
		if _, ok := b.Latency["nodeagent"]; ok {
			t.Fatalf("nodeagent's reports carry no handling time, got %+v", b.Latency["nodeagent"])
		}
	})

	t.Run("each message in the bucket of its stored time", func(t *testing.T) {
		step := time.Millisecond
		q := HistoryQuery{From: from, To: to, Step: step}
		h, err := ReadHistory(ctx, js, q, HistoryLimits{})
		if err != nil {
			t.Fatal(err)
		}
		// What the stream stored, message by message, counted here.
		str, err := js.Stream(ctx, bus.EventsStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := str.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]int, q.buckets())
		inRange := 0
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := str.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			if m.Time.Before(from) || !m.Time.Before(to) {
				continue
			}
			inRange++
			envs, err := bus.DecodeEvents(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			want[int(m.Time.Sub(from)/step)] += max(1, len(envs)-1)
		}
		if inRange != msgs {
			t.Fatalf("%d messages stored in the range, published %d", inRange, msgs)
		}
		got := make([]int, len(h.Buckets))
		for i, b := range h.Buckets {
			got[i] = b.Total
			if !b.Start.Equal(from.Add(time.Duration(i) * step)) {
				t.Fatalf("bucket %d starts at %s", i, b.Start)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("buckets %v, want %v", got, want)
		}
	})

	t.Run("bounded", func(t *testing.T) {
		h, err := ReadHistory(ctx, js, HistoryQuery{From: from, To: to, Step: time.Hour}, HistoryLimits{MaxMessages: 5})
		if err != nil {
			t.Fatal(err)
		}
		if !h.Truncated || h.Messages != 5 || h.ReadTo.Before(from) || !h.ReadTo.Before(to) {
			t.Fatalf("truncated %v after %d messages at %s; want true after 5", h.Truncated, h.Messages, h.ReadTo)
		}
	})

	t.Run("an empty range", func(t *testing.T) {
		later := time.Now().Add(time.Minute)
		h, err := ReadHistory(ctx, js, HistoryQuery{From: later, To: later.Add(time.Minute), Step: time.Minute}, HistoryLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if h.Events != 0 || len(h.Buckets) != 1 || h.Buckets[0].Total != 0 {
			t.Fatalf("%+v", h)
		}
	})
}

// TestHistoryCache: a refresh reads only what the stream stored since
// the buckets it finished; the finished ones come from the cache (the
// stream purged in between still shows them).
func TestHistoryCache(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "admin")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	js := conn.JetStream()
	from := time.Now().Truncate(time.Second).Add(-time.Minute)
	// 4 admitted, 2 scheduled, 1 report of 2 steps; then their bucket ends.
	first := publishEvents(t, ctx, conn, "a-", 4)
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	c := &HistoryCache{Settle: time.Millisecond}
	now := time.Now()
	h, err := c.Read(ctx, js, HistoryQuery{From: from, To: now, Step: time.Second}, HistoryLimits{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if h.Events != 8 || h.Messages != first {
		t.Fatalf("first read: %d events from %d messages, want 8 from %d", h.Events, h.Messages, first)
	}
	str, err := js.Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := str.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	second := publishEvents(t, ctx, conn, "b-", 2) // 2 admitted, 1 scheduled, 1 report of 2 steps
	now = time.Now()
	h, err = c.Read(ctx, js, HistoryQuery{From: from, To: now, Step: time.Second}, HistoryLimits{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := (HistoryQuery{From: from, To: now, Step: time.Second}).buckets(); h.Events != 8+5 || h.Messages != second || len(h.Buckets) != want {
		t.Fatalf("refresh: %d events from %d messages in %d buckets, want 13 from %d", h.Events, h.Messages, len(h.Buckets), second)
	}
	if fmt.Sprint(h.Stages) != "[admission nodeagent scheduler]" {
		t.Fatalf("stages %v", h.Stages)
	}
	for i, b := range h.Buckets {
		if !b.Start.Equal(from.Add(time.Duration(i) * time.Second)) {
			t.Fatalf("bucket %d starts at %s", i, b.Start)
		}
	}
}

// TestTimelineAPI serves the history of a real stream with the
// journals' marks to a console that started after it all happened.
func TestTimelineAPI(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "admin")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	start := time.Now()
	publishEvents(t, ctx, conn, "web-", 4)

	dir := t.TempDir()
	procs := &plan.Journal{Path: filepath.Join(dir, "processes.log")}
	faults := &plan.Journal{Path: filepath.Join(dir, "faults.log")}
	for _, x := range []struct {
		j *plan.Journal
		h plan.Happening
	}{
		{procs, plan.Happening{Time: start.Add(-time.Hour), Kind: plan.HappeningKilled, Process: "api-1", Detail: "killed"}}, // out of range
		{procs, plan.Happening{Time: start.Add(-2 * time.Second), Kind: plan.HappeningStarted, Process: "scheduler-1"}},      // a first start: no mark
		{procs, plan.Happening{Time: start.Add(-time.Second), Kind: plan.HappeningKilled, Process: "scheduler-1", Detail: "killed"}},
		{procs, plan.Happening{Time: start.Add(-time.Second + 300*time.Millisecond), Kind: plan.HappeningRestarted, Process: "scheduler-1"}},
		{faults, plan.Happening{Time: start.Add(-time.Second + 100*time.Millisecond), Kind: plan.HappeningPaused, Process: "admission-0", Detail: "SIGSTOP"}},
	} {
		if err := x.j.Append(x.h); err != nil {
			t.Fatal(err)
		}
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(testToken+",admin,admin,\"system:masters\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := &BusSource{Sess: &client.Session{Bus: conn}, Journals: []string{procs.Path, faults.Path}}
	hub := NewHub(src, time.Second) // never run: nothing was polled
	hs := httptest.NewServer((&Server{Hub: hub, Src: src, Allow: TokenFile(tokens)}).Handler())
	defer hs.Close()
	get := func(query, token string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/api/timeline"+query, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b []byte
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			b = append(b, buf[:n]...)
			if err != nil {
				break
			}
		}
		return resp, b
	}

	if resp, _ := get("", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", resp.StatusCode)
	}
	if resp, b := get("?range=forever", testToken); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `range must be a positive duration`) {
		t.Fatalf("a bad range: %d %s, want 400 naming it", resp.StatusCode, b)
	}
	resp, b := get("?range=5m", testToken)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, bk := range h.Buckets {
		for st, types := range bk.Counts {
			for typ, n := range types {
				counts[st+"/"+typ] += n
			}
		}
	}
	want := "map[admission/PodAdmitted:4 nodeagent/PodRunning:1 nodeagent/PodSandboxReady:1 scheduler/PodScheduled:2]"
	if g := fmt.Sprint(counts); g != want || h.StepSec != 5 || len(h.Buckets) < 60 || len(h.Buckets) > 61 {
		t.Fatalf("counts %s in %d buckets of %ds; want %s in 60 or 61 of 5s", g, len(h.Buckets), h.StepSec, want)
	}
	var marks []string
	for _, m := range h.Marks {
		marks = append(marks, m.Kind+" "+m.Process)
	}
	if g := fmt.Sprint(marks); g != "[killed scheduler-1 paused admission-0 restarted scheduler-1]" {
		t.Fatalf("marks %s, want the kill, the pause and the restart in time order", g)
	}
	if hub.Polls() != 0 {
		t.Fatalf("the history took %d polls; it reads the stream", hub.Polls())
	}
}

// BenchmarkReadHistory reads 15 minutes of a stream of 50,000 messages
// (a pod's admission, scheduling and node report, 20,000 pods' worth)
// into 90 buckets: what one /api/timeline request costs.
func BenchmarkReadHistory(b *testing.B) {
	srv := bustest.Server(b)
	conn := bustest.Connect(b, srv, "admin")
	bustest.Provision(b, conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const msgs = 50_000
	sandbox, _ := bus.NewEnvelope(&eventsv1.PodSandboxReady{})
	for i := range msgs {
		var e *eventsv1.Envelope
		switch i % 5 {
		case 0, 1:
			e, _ = bus.NewEnvelope(&eventsv1.PodAdmitted{})
			e.Stage = "admission"
		case 2, 3:
			e, _ = bus.NewEnvelope(&eventsv1.PodScheduled{NodeName: "n1"})
			e.Stage = "scheduler"
		default:
			e, _ = bus.NewEnvelope(&eventsv1.PodStatusReport{Seq: 1, Steps: []*eventsv1.Envelope{{Id: fmt.Sprint("sb", i), Payload: sandbox.Payload}}})
			e.Stage = "nodeagent"
		}
		e.Id, e.PodUid, e.Namespace, e.PodName, e.NodeName = fmt.Sprint("m", i), fmt.Sprint("u", i), "default", fmt.Sprint("p", i), "n1"
		now := time.Now()
		e.Time, e.HandledStart, e.HandledEnd = timestamppb.New(now), timestamppb.New(now.Add(-time.Millisecond)), timestamppb.New(now)
		if _, err := conn.PublishAsync(e); err != nil {
			b.Fatal(err)
		}
	}
	if err := conn.PublishAsyncComplete(ctx); err != nil {
		b.Fatal(err)
	}
	q, err := ParseHistoryQuery(func(string) string { return "" }, time.Now().Add(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		h, err := ReadHistory(ctx, conn.JetStream(), q, HistoryLimits{})
		if err != nil {
			b.Fatal(err)
		}
		if h.Messages != msgs || h.Truncated {
			b.Fatalf("read %d messages (truncated %v), want %d", h.Messages, h.Truncated, msgs)
		}
	}
	b.ReportMetric(float64(msgs)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

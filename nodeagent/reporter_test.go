package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"google.golang.org/protobuf/proto"
)

// stillClock reads a time that moves only when a test sets it.
type stillClock struct{ t time.Time }

func (c *stillClock) Now() time.Time                        { return c.t }
func (c *stillClock) NewTimer(time.Duration) Timer          { panic("stillClock: no timers") }
func (c *stillClock) AfterFunc(time.Duration, func()) Timer { panic("stillClock: no timers") }

// recPublisher records what it acknowledges, unfolded as a reader of the
// stream sees it (eventsv1.Unfold); the next fail publishes fail.
type recPublisher struct {
	envs     []*eventsv1.Envelope
	msgs     []string // ids of the messages acknowledged
	attempts []string // ids of every publish, failed or not
	fail     int
}

var errPublish = errors.New("publish failed")

func (p *recPublisher) Publish(_ context.Context, env *eventsv1.Envelope) error {
	p.attempts = append(p.attempts, env.GetId())
	if p.fail > 0 {
		p.fail--
		return errPublish
	}
	p.msgs = append(p.msgs, env.GetId())
	p.envs = append(p.envs, eventsv1.Unfold(proto.Clone(env).(*eventsv1.Envelope))...)
	return nil
}

func (p *recPublisher) take() []*eventsv1.Envelope {
	out := p.envs
	p.envs, p.msgs = nil, nil
	return out
}

var reporterT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestReporter() (*reporter, *recPublisher, *stillClock) {
	pub, clock := &recPublisher{}, &stillClock{t: reporterT0}
	d := &workerDeps{cfg: DefaultConfig("node-1", "10.244.1.0/24"), pub: pub, clock: clock,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Uid: "u1", Namespace: "ns", Name: "web"}}
	return newReporter(d, pod), pub, clock
}

// podStatus is a status with phase and a Ready condition.
func podStatus(phase string, ready bool, msg string) *corev1.PodStatus {
	s := "False"
	if ready {
		s = "True"
	}
	return &corev1.PodStatus{Phase: phase, PodIp: "10.244.1.2", HostIp: "127.0.0.1",
		Conditions: []*corev1.PodCondition{{Type: "Ready", Status: s, Message: msg}}}
}

func ids(envs []*eventsv1.Envelope) []string {
	var out []string
	for _, e := range envs {
		out = append(out, e.GetId())
	}
	return out
}

func TestReporterFlush(t *testing.T) {
	r, pub, clock := newTestReporter()
	ctx := context.Background()
	started := func(name string) *eventsv1.Envelope {
		return &eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerStarted{ContainerStarted: &eventsv1.ContainerStarted{Container: name}}}
	}
	r.Normal(eventsv1.ReasonStarted, "Started container a")
	r.Warn(eventsv1.ReasonUnhealthy, "Readiness probe failed")
	r.Emit(started("a"))
	r.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ImagePulled{ImagePulled: &eventsv1.ImagePulled{Container: "b"}}})
	r.Emit(started("b"))
	st := podStatus("Pending", false, "")
	if wake := r.Flush(ctx, st, nil); !wake.IsZero() {
		t.Fatalf("Flush = %v, want zero (nothing pending)", wake)
	}
	seq := reporterT0.UnixNano()
	if want := []string{fmt.Sprintf("uid/u1/PodStatusReport/g%d/a1", seq)}; !slices.Equal(pub.msgs, want) {
		t.Errorf("messages %q, want %q (the steps inside the report)", pub.msgs, want)
	}
	got := pub.take()
	want := []string{
		fmt.Sprintf("uid/u1/PodStatusReport/g%d/a1", seq),
		fmt.Sprintf("uid/u1/ContainerStarted/g%d/a1", seq),
		fmt.Sprintf("uid/u1/ImagePulled/g%d/a1", seq),
		fmt.Sprintf("uid/u1/ContainerStarted/g%d/a1/1", seq), // second of one type after one report
	}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("published %q, want %q", ids(got), want)
	}
	for _, e := range got {
		if e.GetPodUid() != "u1" || e.GetNamespace() != "ns" || e.GetPodName() != "web" || e.GetNodeName() != "node-1" ||
			e.GetStage() != Stage || e.GetReplica() != "node-1" || e.GetAttempt() != 1 || e.GetGeneration() != seq ||
			!e.GetTime().AsTime().Equal(reporterT0) {
			t.Errorf("envelope %s routing fields: %v", e.GetId(), e)
		}
	}
	rep := got[0].GetPodStatusReport()
	if rep.GetSeq() != seq || !proto.Equal(rep.GetStatus(), st) || len(rep.GetEvents()) != 2 ||
		rep.GetEvents()[0].GetType() != "Normal" || rep.GetEvents()[1].GetType() != "Warning" {
		t.Errorf("report = %v", rep)
	}
	if !proto.Equal(r.Reported(), st) {
		t.Errorf("Reported = %v, want %v", r.Reported(), st)
	}
	// Reported decodes the status kept encoded: each caller gets its own.
	if mine := r.Reported(); mine == r.Reported() || func() bool { mine.Phase = "Changed"; return !proto.Equal(r.Reported(), st) }() {
		t.Error("Reported hands out one status to its callers")
	}

	t.Run("unchanged status publishes nothing", func(t *testing.T) {
		r.Flush(ctx, podStatus("Pending", false, ""), nil)
		if got := pub.take(); len(got) != 0 {
			t.Errorf("published %q", ids(got))
		}
	})
	t.Run("seq grows by one on a still clock", func(t *testing.T) {
		r.Flush(ctx, podStatus("Pending", false, "changed"), nil)
		if got := pub.take(); len(got) != 1 || got[0].GetGeneration() != seq+1 {
			t.Errorf("published %q, want one report with seq %d", ids(got), seq+1)
		}
	})
	t.Run("seq is at least the clock", func(t *testing.T) {
		clock.t = reporterT0.Add(time.Second)
		r.Flush(ctx, podStatus("Pending", false, "changed again"), nil)
		if got := pub.take(); len(got) != 1 || got[0].GetGeneration() != clock.t.UnixNano() {
			t.Errorf("published %q, want one report with seq %d", ids(got), clock.t.UnixNano())
		}
	})
	t.Run("PodDeleted last, one id per pod", func(t *testing.T) {
		r.Deleted()
		r.Flush(ctx, podStatus("Pending", false, "changed again"), nil)
		got := pub.take()
		if len(got) != 1 || got[0].GetId() != "uid/u1/PodDeleted" || got[0].GetPodDeleted() == nil ||
			got[0].GetGeneration() != clock.t.UnixNano()+1 {
			t.Errorf("published %v, want PodDeleted with seq %d", got, clock.t.UnixNano()+1)
		}
	})
}

func TestReporterRetriesFailedPublishes(t *testing.T) {
	r, pub, clock := newTestReporter()
	ctx := context.Background()
	r.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodSandboxReady{PodSandboxReady: &eventsv1.PodSandboxReady{}}})
	pub.fail = 2
	st := podStatus("Pending", false, "")
	if wake, want := r.Flush(ctx, st, nil), reporterT0.Add(r.d.cfg.PublishRetry); !wake.Equal(want) {
		t.Fatalf("Flush with a failing publisher = %v, want %v", wake, want)
	}
	clock.t = clock.t.Add(time.Second)
	if wake := r.Flush(ctx, st, nil); wake.IsZero() {
		t.Fatal("second failure not retried")
	}
	clock.t = clock.t.Add(time.Second)
	if wake := r.Flush(ctx, st, nil); !wake.IsZero() {
		t.Fatalf("Flush = %v, want zero", wake)
	}
	seq := reporterT0.UnixNano()
	want := []string{fmt.Sprintf("uid/u1/PodStatusReport/g%d/a1", seq), fmt.Sprintf("uid/u1/PodSandboxReady/g%d/a1", seq)}
	if got := ids(pub.take()); !slices.Equal(got, want) {
		t.Errorf("published %q, want %q (the same envelopes, no new report)", got, want)
	}
	if want := []string{want[0], want[0], want[0]}; !slices.Equal(pub.attempts, want) {
		t.Errorf("attempts %q, want %q", pub.attempts, want)
	}

	t.Run("a cancelled context does not ask for a retry", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		pub.fail = 1
		if wake := r.Flush(cctx, podStatus("Running", false, ""), nil); !wake.IsZero() {
			t.Errorf("Flush = %v, want zero", wake)
		}
		if wake := r.Flush(ctx, podStatus("Running", false, ""), nil); !wake.IsZero() || len(pub.msgs) != 1 || len(pub.take()) != 2 {
			t.Errorf("the kept report and PodRunning were not published")
		}
	})
}

func TestReporterDerivesEvents(t *testing.T) {
	fail := &podFailure{reason: "Error", message: `container "a" exited with code 1`, container: "a"}
	type step struct {
		st        *corev1.PodStatus
		final     *podFailure
		readiness bool     // a readiness probe failed before the flush
		want      []string // types of the events after the report
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"running then ready", []step{
			{st: podStatus("Pending", false, "")},
			{st: podStatus("Running", false, ""), want: []string{"PodRunning"}},
			{st: podStatus("Running", true, ""), want: []string{"PodReady"}},
			{st: podStatus("Running", true, "x")},
		}},
		{"ready at once", []step{
			{st: podStatus("Running", true, ""), want: []string{"PodRunning", "PodReady"}},
		}},
		{"not ready again", []step{
			{st: podStatus("Running", true, ""), want: []string{"PodRunning", "PodReady"}},
			{st: podStatus("Running", false, "containers with unready status: [a]"), want: []string{"PodNotReady"}},
			{st: podStatus("Running", true, ""), want: []string{"PodReady"}},
		}},
		{"a readiness failure is the only PodNotReady", []step{
			{st: podStatus("Running", true, ""), want: []string{"PodRunning", "PodReady"}},
			{st: podStatus("Running", false, ""), readiness: true, want: []string{"PodNotReady"}},
		}},
		{"final failure once", []step{
			{st: podStatus("Failed", false, ""), final: fail, want: []string{"PodFailed"}},
			{st: podStatus("Failed", false, "x"), final: fail},
		}},
		{"no final failure while deleting", []step{
			{st: podStatus("Failed", false, "")},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, pub, _ := newTestReporter()
			for i, s := range tc.steps {
				if s.readiness {
					r.ReadinessFailed("a", "HTTP probe failed with statuscode: 500")
				}
				r.Flush(context.Background(), s.st, s.final)
				got := pub.take()
				if len(got) > 0 && got[0].GetPodStatusReport() == nil {
					t.Fatalf("step %d: first envelope %s is not the report", i, got[0].GetId())
				}
				var types []string
				for _, e := range got[min(1, len(got)):] {
					types = append(types, string(e.Type()))
					if nr := e.GetPodNotReady(); nr != nil {
						if s.readiness && (nr.GetReason() != eventsv1.ReasonUnhealthy || nr.GetContainer() != "a") {
							t.Errorf("step %d: PodNotReady %v, want the probe's", i, nr)
						}
						if !s.readiness && (nr.GetReason() != eventsv1.ReasonContainersNotReady || nr.GetMessage() != s.st.GetConditions()[0].GetMessage()) {
							t.Errorf("step %d: PodNotReady %v, want ContainersNotReady with the condition's message", i, nr)
						}
					}
					if pf := e.GetPodFailed(); pf != nil && (!pf.GetFinal() || pf.GetReason() != fail.reason ||
						pf.GetMessage() != fail.message || pf.GetContainer() != fail.container) {
						t.Errorf("step %d: PodFailed %v, want the final failure %v", i, pf, fail)
					}
				}
				if !slices.Equal(types, s.want) {
					t.Errorf("step %d: events %q, want %q", i, types, s.want)
				}
			}
		})
	}
}

// The steps right behind a report travel inside it, each with its own id
// and the time it happened; the first event that is not a step (one a stage
// consumes) and all after it are messages of their own, so the order a
// reader sees is the order they happened.
func TestReporterFoldsSteps(t *testing.T) {
	r, pub, clock := newTestReporter()
	emit := func(env *eventsv1.Envelope) {
		clock.t = clock.t.Add(time.Millisecond)
		r.Emit(env)
	}
	emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodSandboxReady{PodSandboxReady: &eventsv1.PodSandboxReady{PodIp: "10.244.1.2"}}})
	emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ImagePulled{ImagePulled: &eventsv1.ImagePulled{Container: "a"}}})
	emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerStarted{ContainerStarted: &eventsv1.ContainerStarted{Container: "a"}}})
	emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerExited{ContainerExited: &eventsv1.ContainerExited{Container: "a", ExitCode: 1}}})
	emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerStarted{ContainerStarted: &eventsv1.ContainerStarted{Container: "a", RestartCount: 1}}})
	clock.t = clock.t.Add(time.Millisecond)
	r.Flush(context.Background(), podStatus("Running", true, ""), nil)

	seq := r.seq
	id := func(typ string, n string) string { return fmt.Sprintf("uid/u1/%s/g%d/a1%s", typ, seq, n) }
	// PodReady restates the report's Ready condition: the report carries
	// it and everything before it, the ContainerExited too.
	if want := []string{id("PodStatusReport", "")}; !slices.Equal(pub.msgs, want) {
		t.Errorf("messages %q, want %q", pub.msgs, want)
	}
	got := pub.take()
	want := []string{id("PodStatusReport", ""), id("PodSandboxReady", ""), id("ImagePulled", ""), id("ContainerStarted", ""),
		id("ContainerExited", ""), id("ContainerStarted", "/1"), id("PodRunning", ""), id("PodReady", "")}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("unfolded %q, want %q", ids(got), want)
	}
	for i, e := range got[1:6] {
		if at := reporterT0.Add(time.Duration(i+1) * time.Millisecond); !e.GetTime().AsTime().Equal(at) {
			t.Errorf("%s at %v, want %v (when it happened)", e.GetId(), e.GetTime().AsTime(), at)
		}
		if e.GetPodUid() != "u1" || e.GetNodeName() != "node-1" || e.GetStage() != Stage || e.GetGeneration() != seq {
			t.Errorf("%s routing fields: %v", e.GetId(), e)
		}
	}
	if steps := got[0].GetPodStatusReport().GetSteps(); len(steps) != 7 || steps[0].GetPodUid() != "" {
		t.Errorf("report steps %v, want 7 with the report's routing left out", steps)
	}

	// Without a readiness change, an event no stage consumes but that is
	// not a step (ContainerExited) and the steps after it are messages of
	// their own, in order.
	emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerExited{ContainerExited: &eventsv1.ContainerExited{Container: "a", ExitCode: 1}}})
	emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerStarted{ContainerStarted: &eventsv1.ContainerStarted{Container: "a", RestartCount: 2}}})
	r.Flush(context.Background(), podStatus("Running", true, "restarted"), nil)
	seq = r.seq
	if want := []string{id("PodStatusReport", ""), id("ContainerExited", ""), id("ContainerStarted", "")}; !slices.Equal(pub.msgs, want) {
		t.Errorf("messages %q, want %q", pub.msgs, want)
	}
	pub.take()

	// A readiness change is carried even behind such an event.
	emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_ContainerExited{ContainerExited: &eventsv1.ContainerExited{Container: "a", ExitCode: 1}}})
	r.Flush(context.Background(), podStatus("Running", false, "containers with unready status: [a]"), nil)
	seq = r.seq
	if want := []string{id("PodStatusReport", "")}; !slices.Equal(pub.msgs, want) {
		t.Errorf("messages %q, want only the report", pub.msgs)
	}
	if got, want := ids(pub.take()), []string{id("PodStatusReport", ""), id("ContainerExited", ""), id("PodNotReady", "")}; !slices.Equal(got, want) {
		t.Errorf("unfolded %q, want %q", got, want)
	}
}

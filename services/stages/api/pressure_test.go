package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

func TestEventsGauge(t *testing.T) {
	for _, tc := range []struct {
		name        string
		used, limit uint64
		err         error
		wantRefused bool
	}{
		{name: "empty", used: 0, limit: 1000},
		{name: "below the mark", used: 899, limit: 1000},
		{name: "at the mark", used: 900, limit: 1000, wantRefused: true},
		{name: "full", used: 1000, limit: 1000, wantRefused: true},
		{name: "no MaxBytes", used: 1 << 40, limit: 0},
		{name: "unreadable: the stream's own limit holds", err: errors.New("no stream"), limit: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reads atomic.Int32
			g := &eventsGauge{interval: time.Hour, highWater: 0.9, read: func(context.Context) (uint64, uint64, error) {
				reads.Add(1)
				return tc.used, tc.limit, tc.err
			}}
			for range 50 {
				st := g.check(context.Background(), "web")
				if (st != nil) != tc.wantRefused {
					t.Fatalf("check = %v, want refused %v", st, tc.wantRefused)
				}
				if st != nil && (st.GetCode() != 429 || st.GetReason() != eventsv1.ReasonTooManyRequests ||
					!strings.Contains(st.GetMessage(), "EventsMaxBytes") || !strings.Contains(st.GetMessage(), "high-water mark of 90%")) {
					t.Fatalf("refusal %v does not name the limit", st)
				}
			}
			if n := reads.Load(); n != 1 {
				t.Fatalf("stream info read %d times within one interval, want once", n)
			}
		})
	}
}

func TestUserLimiter(t *testing.T) {
	l := newUserLimiter(0.001, 3) // three, then practically none
	alice := &corev1.UserInfo{Username: "alice"}
	for i := range 3 {
		if st := l.allow(alice, "web"); st != nil {
			t.Fatalf("creation %d of the burst refused: %v", i, st)
		}
	}
	st := l.allow(alice, "web")
	if st.GetCode() != 429 || st.GetReason() != eventsv1.ReasonTooManyRequests || !strings.Contains(st.GetMessage(), `user "alice"`) || !strings.Contains(st.GetMessage(), "UserPodQPS") {
		t.Fatalf("past the burst: %v, want 429 TooManyRequests naming alice and UserPodQPS", st)
	}
	if st := l.allow(&corev1.UserInfo{Username: "bob"}, "web"); st != nil {
		t.Fatalf("another user refused: %v", st)
	}
	admin := &corev1.UserInfo{Username: "admin", Groups: []string{"system:masters"}}
	for range 10 {
		if st := l.allow(admin, "web"); st != nil {
			t.Fatalf("system:masters rate limited: %v", st)
		}
	}
	if newUserLimiter(0, 0).allow(alice, "web") != nil {
		t.Fatal("UserPodQPS 0 limits")
	}
}

func TestBackpressureConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"high water zero", func(c *Config) { c.EventsHighWater = 0 }},
		{"high water above one", func(c *Config) { c.EventsHighWater = 1.1 }},
		{"no interval", func(c *Config) { c.EventsInfoInterval = 0 }},
		{"negative qps", func(c *Config) { c.UserPodQPS = -1 }},
		{"no burst", func(c *Config) { c.UserPodBurst = 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			if err := c.Validate(); err == nil {
				t.Fatal("Validate accepted it")
			}
		})
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// busFixture is the api stage fixture on a real embedded NATS server with
// a tiny PODFLOW_EVENTS (maxBytes), serving pipeline.CreatePodSubject.
func busFixture(t *testing.T, maxBytes int64) (*fixture, *bus.Conn) {
	f, conn, _ := busFixtureServer(t, maxBytes)
	return f, conn
}

// busFixtureServer is busFixture with its server, to give users their
// bus identities (bustest.ConnectUser).
func busFixtureServer(t *testing.T, maxBytes int64) (*fixture, *bus.Conn, *bus.Embedded) {
	t.Helper()
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "api-test")
	cfg := bus.DefaultStreamsConfig()
	cfg.EventsMaxBytes = maxBytes
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	if err := bus.Provision(ctx, conn.JetStream(), bus.Topology{Streams: bus.DefaultStreams(cfg)}); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	f.s.env.Pub, f.s.env.NATS = stage.NewPublisher(conn), conn.NATS()
	f.s.events.interval = 50 * time.Millisecond
	f.s.events.read = jetStreamUsage(conn.JetStream())
	f.s.intake.limits = jetStreamLimits(conn.JetStream())
	stagetest.Start(t, func(ctx context.Context, g *errgroup.Group) error {
		return f.s.serve(ctx, g, pipeline.CreatePodSubject, f.s.onCreatePod)
	})
	return f, conn, srv
}

func streamState(t *testing.T, conn *bus.Conn) (msgs, bytes uint64) {
	t.Helper()
	st, err := conn.JetStream().Stream(context.Background(), bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs, info.State.Bytes
}

// inFlight is an event of a pod already accepted (what node agents and
// stages publish).
func inFlight(i int) *eventsv1.Envelope {
	return &eventsv1.Envelope{
		Id: fmt.Sprintf("sched-%d", i), PodUid: fmt.Sprintf("uid-%d", i), Namespace: "team", PodName: fmt.Sprintf("p%d", i),
		Time: timestamppb.Now(), Stage: "scheduler", Replica: "s-1", Attempt: 1,
		Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: "n1"}},
	}
}

// TestHighWaterRefusesNewPods: once PODFLOW_EVENTS is past the high-water
// mark, new pods are refused at once (429 TooManyRequests naming the
// limit, over the bus's request-reply and as PodRejected), events of pods
// already accepted still fit, nothing stored is lost, and once the stream
// has room the next pod is accepted.
func TestHighWaterRefusesNewPods(t *testing.T) {
	const maxBytes = 64 << 10
	f, conn, srv := busFixtureServer(t, maxBytes)
	f.s.intake.share = 0 // the stream's fill alone
	alice := bustest.ConnectUser(t, srv, "alice", "alice")
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	accepted := 0
	for _, b := uint64(0), uint64(0); b < maxBytes*91/100; accepted++ {
		if _, err := conn.Publish(ctx, inFlight(accepted)); err != nil {
			t.Fatalf("fill to the high-water mark: %v", err)
		}
		_, b = streamState(t, conn)
	}
	time.Sleep(2 * f.s.events.interval) // the gauge's next read sees it

	create := func(name string) (*apiv1.Response, time.Duration, error) {
		b, _ := proto.Marshal(&eventsv1.PodRequested{Token: aliceToken, Pod: &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: name}}})
		start := time.Now()
		m, err := alice.NATS().Request(pipeline.CreatePodSubject, b, time.Second)
		if err != nil {
			return nil, time.Since(start), err
		}
		resp := &apiv1.Response{}
		return resp, time.Since(start), proto.Unmarshal(m.Data, resp)
	}
	resp, took, err := create("new")
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetStatus()
	if st.GetCode() != 429 || st.GetReason() != eventsv1.ReasonTooManyRequests || !strings.Contains(st.GetMessage(), "EventsMaxBytes") || took > time.Second {
		t.Fatalf("create past the high-water mark: %v after %s, want a fast 429 naming EventsMaxBytes", st, took)
	}
	if msgs, _ := streamState(t, conn); msgs != uint64(accepted) {
		t.Fatalf("the refused pod took room: %d messages, %d accepted", msgs, accepted)
	}

	// A PodRequested that reached the stream anyway (fire-and-forget)
	// is rejected rather than authorized: no further events for it.
	reply := bus.UserInbox("alice") + ".queued"
	sub, err := conn.NATS().SubscribeSync(reply)
	if err != nil {
		t.Fatal(err)
	}
	e := requested(f, aliceToken, &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "queued"}, Spec: &corev1.PodSpec{}})
	e.GetPodRequested().ReplyTo = reply
	if err := f.s.Handle(ctx, stagetest.Deliver(f.s.env, e)); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := &apiv1.Response{}
	if err := proto.Unmarshal(m.Data, got); err != nil || got.GetStatus().GetReason() != eventsv1.ReasonTooManyRequests {
		t.Fatalf("queued PodRequested answered %v (%v), want TooManyRequests", got.GetStatus(), err)
	}

	// The pods in flight keep the headroom.
	for i := range 20 {
		if _, err := conn.Publish(ctx, inFlight(1000+i)); err != nil {
			t.Fatalf("event %d of a pod in flight refused above the high-water mark: %v", i, err)
		}
	}
	msgs, _ := streamState(t, conn)
	if msgs != uint64(accepted)+1+20 { // + the PodRejected
		t.Fatalf("%d messages, want the %d accepted, the rejection and 20 more", msgs, accepted)
	}

	// With room again, the next pod is accepted (it enters the stream;
	// no stage runs here to answer it).
	st2, err := conn.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * f.s.events.interval)
	if _, _, err := create("after"); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("create with room: %v, want it accepted (no answer without the later stages)", err)
	}
	if msgs, _ := streamState(t, conn); msgs != 1 {
		t.Fatalf("%d messages after the purge, want the accepted PodRequested", msgs)
	}
}

// TestUserRateLimitOnBus: a user past their pod creation rate is refused
// 429 at the intake, over NATS and before the stream, while another user
// goes on creating pods.
func TestUserRateLimitOnBus(t *testing.T) {
	f, conn, srv := busFixtureServer(t, 1<<20)
	f.s.intake.limiter = newUserLimiter(0.001, 2)
	alice := bustest.ConnectUser(t, srv, "alice", "alice")
	builder := bustest.ConnectUser(t, srv, "system:serviceaccount:team:builder", "builder")
	create := func(c *bus.Conn, token, name string) (*apiv1.Response, error) {
		b, _ := proto.Marshal(&eventsv1.PodRequested{Token: token, Pod: &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: name}}})
		m, err := c.NATS().Request(pipeline.CreatePodSubject, b, 500*time.Millisecond)
		if err != nil {
			return nil, err
		}
		resp := &apiv1.Response{}
		return resp, proto.Unmarshal(m.Data, resp)
	}
	for _, name := range []string{"a1", "a2"} {
		if _, err := create(alice, aliceToken, name); !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("%s: %v, want it accepted (no answer without the later stages)", name, err)
		}
	}
	resp, err := create(alice, aliceToken, "a3")
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetStatus(); st.GetCode() != 429 || st.GetReason() != eventsv1.ReasonTooManyRequests || st.GetName() != "a3" {
		t.Fatalf("third creation: %v, want 429 for a3", st)
	}
	if _, err := create(builder, saToken, "b1"); !errors.Is(err, nats.ErrTimeout) { // another user
		t.Fatalf("the ServiceAccount's creation: %v, want it accepted", err)
	}
	if msgs, _ := streamState(t, conn); msgs != 3 { // a1, a2 and b1; a3 refused before the stream
		t.Fatalf("%d events on the stream, want 3", msgs)
	}
}

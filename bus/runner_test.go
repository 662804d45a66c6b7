package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// running is a Runner started by startRunner.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// stop cancels the runner and waits for Run to return.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(bustest.Timeout):
		t.Fatal("runner did not stop")
		return nil
	}
}

func startRunner(t *testing.T, conn *bus.Conn, cfg bus.RunnerConfig, h bus.Handler) *running {
	t.Helper()
	r, err := bus.NewRunner(conn, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rn.done)
		rn.err = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rn.done:
		case <-time.After(bustest.Timeout):
		}
	})
	return rn
}

// recorder is an Observer that keeps every observation.
type recorder struct {
	mu  sync.Mutex
	obs []bus.Observation
}

func (r *recorder) Observe(o bus.Observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.obs = append(r.obs, o)
}

func (r *recorder) count(out bus.Outcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.obs {
		if o.Outcome == out {
			n++
		}
	}
	return n
}

func (r *recorder) outcomes() []bus.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]bus.Outcome, len(r.obs))
	for i, o := range r.obs {
		out[i] = o.Outcome
	}
	return out
}

// counter counts handled messages per pod uid.
type counter struct {
	mu sync.Mutex
	n  map[string]int
	by map[string]map[string]int // replica -> uid -> n
}

func newCounter() *counter { return &counter{n: map[string]int{}, by: map[string]map[string]int{}} }

func (c *counter) add(replica, uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[uid]++
	if c.by[replica] == nil {
		c.by[replica] = map[string]int{}
	}
	c.by[replica][uid]++
}

func (c *counter) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n)
}

// exactlyOnce fails unless each of want uids was counted exactly once.
func (c *counter) exactlyOnce(t *testing.T, want int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.n) != want {
		t.Fatalf("%d distinct messages handled, want %d", len(c.n), want)
	}
	for uid, n := range c.n {
		if n != 1 {
			t.Errorf("%s handled %d times", uid, n)
		}
	}
}

func testRunnerConfig(stage string) bus.RunnerConfig {
	rc := bus.DefaultRunnerConfig(stage)
	rc.FilterSubjects = []string{bus.TypeFilter("PodPersisted")}
	rc.Concurrency = 4
	rc.Backoff = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}
	rc.AckWait = 2 * time.Second
	rc.DrainTimeout = 2 * time.Second
	return rc
}

func publishAll(t *testing.T, conn *bus.Conn, envs []*eventsv1.Envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	for _, e := range envs {
		if _, err := conn.PublishAsync(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.PublishAsyncComplete(ctx); err != nil {
		t.Fatal(err)
	}
}

func consumerInfo(t *testing.T, conn *bus.Conn, stream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	c, err := conn.JetStream().Consumer(ctx, stream, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// settled waits until the consumer has delivered and had acked (or
// terminated) every message.
func settled(t *testing.T, conn *bus.Conn, name string) {
	t.Helper()
	bustest.Eventually(t, "consumer "+name+" to settle", func() bool {
		i := consumerInfo(t, conn, bus.EventsStream, name)
		return i.NumPending == 0 && i.NumAckPending == 0 && i.NumRedelivered == 0
	})
}

func TestRunnerReplicasSplitWork(t *testing.T) {
	srv := bustest.Server(t)
	pub := bustest.Connect(t, srv, "publisher")
	rc := testRunnerConfig("split")
	bustest.Provision(t, pub, rc.ConsumerSpec())

	handled := newCounter()
	var replicas []*running
	for _, name := range []string{"split-0", "split-1"} {
		cfg := rc
		cfg.Replica = name
		conn := bustest.Connect(t, srv, name)
		replicas = append(replicas, startRunner(t, conn, cfg, func(ctx context.Context, d *bus.Delivery) error {
			handled.add(d.Replica, d.Envelope.PodUid)
			time.Sleep(time.Millisecond)
			return nil
		}))
	}
	// Both replicas have a pull request waiting before the burst.
	bustest.Eventually(t, "both replicas to pull", func() bool {
		return consumerInfo(t, pub, bus.EventsStream, "split").NumWaiting >= 2
	})
	const n = 200
	publishAll(t, pub, podEvents(n))
	bustest.Eventually(t, "every message handled", func() bool { return handled.distinct() == n })
	settled(t, pub, "split")
	for _, r := range replicas {
		if err := r.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	handled.exactlyOnce(t, n)
	for _, name := range []string{"split-0", "split-1"} {
		if len(handled.by[name]) == 0 {
			t.Errorf("replica %s handled nothing: %v", name, handled.by)
		}
	}
	info := consumerInfo(t, pub, bus.EventsStream, "split")
	if info.AckFloor.Stream != n || info.Delivered.Stream != n {
		t.Fatalf("ack floor %d, delivered %d; want %d", info.AckFloor.Stream, info.Delivered.Stream, n)
	}
}

func TestRunnerRedeliversWhenReplicaDies(t *testing.T) {
	srv := bustest.Server(t)
	pub := bustest.Connect(t, srv, "publisher")
	rc := testRunnerConfig("death")
	rc.AckWait = time.Second
	rc.Concurrency = 10
	rc.DrainTimeout = 500 * time.Millisecond
	bustest.Provision(t, pub, rc.ConsumerSpec())

	// Replica a takes every message and never finishes any.
	connA := bustest.Connect(t, srv, "death-a")
	var inFlight atomic.Int32
	a := rc
	a.Replica = "death-a"
	ra := startRunner(t, connA, a, func(ctx context.Context, d *bus.Delivery) error {
		inFlight.Add(1)
		<-ctx.Done() // until the runner gives up on it
		return ctx.Err()
	})
	const n = 10
	publishAll(t, pub, podEvents(n))
	bustest.Eventually(t, "replica a to hold every message", func() bool { return inFlight.Load() == n })

	// a dies: its connection goes away with its messages unacked.
	connA.NATS().Close()

	handled := newCounter()
	deliveries := make(chan uint64, n)
	b := rc
	b.Replica = "death-b"
	startRunner(t, bustest.Connect(t, srv, "death-b"), b, func(ctx context.Context, d *bus.Delivery) error {
		handled.add(d.Replica, d.Envelope.PodUid)
		deliveries <- d.NumDelivered
		return nil
	})
	bustest.Eventually(t, "replica b to handle a's messages", func() bool { return handled.distinct() == n })
	settled(t, pub, "death")
	handled.exactlyOnce(t, n)
	for i := 0; i < n; i++ {
		if nd := <-deliveries; nd < 2 {
			t.Fatalf("message handled by b on delivery %d, want a redelivery", nd)
		}
	}
	if err := ra.stop(t); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("dead replica's Run returned %v, want iterator closed", err)
	}
}

func TestRunnerDeadLetters(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "dlq")
	rc := testRunnerConfig("dlq")
	rc.MaxDeliver = 3
	rc.FilterSubjects = []string{bus.PodPrefix + ".>"}
	obs := &recorder{}
	rc.Observer = obs
	bustest.Provision(t, conn, rc.ConsumerSpec())

	var calls sync.Map // uid -> *atomic.Int32
	startRunner(t, conn, rc, func(ctx context.Context, d *bus.Delivery) error {
		v, _ := calls.LoadOrStore(d.Envelope.PodUid, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
		switch d.Envelope.PodUid {
		case "poison":
			return errors.New("cannot handle this")
		case "forbidden":
			return bus.Permanent(fmt.Errorf("pod %q: %w", d.Envelope.PodName, errors.New("forbidden")))
		case "panics":
			panic("boom")
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	publishAll(t, conn, []*eventsv1.Envelope{podEvent("ok", "ok", 1), podEvent("poison", "poison", 1), podEvent("forbidden", "forbidden", 1), podEvent("panics", "panics", 1)})
	// An undecodable message.
	if _, err := conn.JetStream().Publish(ctx, "podflow.pod.PodPersisted.~.default.garbage", []byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}

	dlq, err := conn.JetStream().Stream(ctx, bus.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "four dead letters", func() bool {
		info, err := dlq.Info(ctx)
		return err == nil && info.State.Msgs == 4
	})
	settled(t, conn, "dlq")

	type want struct {
		code       string
		deliveries uint64
		calls      int32
	}
	wants := map[string]want{
		"poison":    {bus.CodeMaxDeliver, 3, 3},
		"panics":    {bus.CodeMaxDeliver, 3, 3},
		"forbidden": {bus.CodePermanent, 1, 1},
		"":          {bus.CodeDecode, 1, 0},
	}
	for seq := uint64(1); seq <= 4; seq++ {
		raw, err := dlq.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if raw.Subject != bus.DLQSubject("dlq") {
			t.Errorf("dead letter on %q", raw.Subject)
		}
		env, err := bus.DecodeEnvelope(raw.Data)
		if err != nil {
			t.Fatal(err)
		}
		dl := env.GetDeadLetter()
		w, ok := wants[env.PodUid]
		if !ok {
			t.Fatalf("unexpected dead letter %v", env)
		}
		delete(wants, env.PodUid)
		if dl.Code != w.code || dl.Deliveries != w.deliveries || dl.Stream != bus.EventsStream || dl.Consumer != "dlq" || dl.Error == "" {
			t.Errorf("%q: dead letter %v, want code %s after %d deliveries", env.PodUid, dl, w.code, w.deliveries)
		}
		if !errors.Is(&bus.Error{Code: dl.Code}, map[string]error{bus.CodeMaxDeliver: bus.ErrMaxDeliver, bus.CodePermanent: bus.ErrPermanent, bus.CodeDecode: bus.ErrDecode}[w.code]) {
			t.Errorf("code %q does not match its sentinel", dl.Code)
		}
		if env.PodUid != "" {
			orig, err := bus.DecodeEnvelope(dl.Data)
			if err != nil || orig.PodUid != env.PodUid || env.CausedBy != orig.Id || env.Stage != "dlq" {
				t.Errorf("dead letter does not carry the original: %v / %v, %v", env, orig, err)
			}
			if n, _ := calls.Load(env.PodUid); n.(*atomic.Int32).Load() != w.calls {
				t.Errorf("%q handled %d times, want %d", env.PodUid, n.(*atomic.Int32).Load(), w.calls)
			}
		}
	}
	if got := obs.count(bus.OutcomeDeadLettered); got != 4 {
		t.Errorf("observer saw %d dead letters, want 4: %v", got, obs.outcomes())
	}
	if got := obs.count(bus.OutcomeNaked); got != 4 { // 2 for poison, 2 for panics
		t.Errorf("observer saw %d naks, want 4: %v", got, obs.outcomes())
	}
	if got := obs.count(bus.OutcomeAcked); got != 1 {
		t.Errorf("observer saw %d acks, want 1: %v", got, obs.outcomes())
	}
}

func TestRunnerRecordsMessagesWhoseHandlerNeverReturned(t *testing.T) {
	t.Run("core advisory, a replica alive", func(t *testing.T) { testHandlerNeverReturned(t, false) })
	t.Run("durable advisory, no replica alive", func(t *testing.T) { testHandlerNeverReturned(t, true) })
}

// testHandlerNeverReturned: replica a dies on a message's only delivery.
// Without the advisory consumer, replica b must already be listening;
// with it, b starts only after the advisory was published.
func testHandlerNeverReturned(t *testing.T, durable bool) {
	srv := bustest.Server(t)
	pub := bustest.Connect(t, srv, "publisher")
	rc := testRunnerConfig("hung")
	rc.MaxDeliver = 1
	rc.AckWait = time.Second
	rc.DrainTimeout = 500 * time.Millisecond
	if durable {
		bustest.Provision(t, pub, rc.ConsumerSpecs()...)
	} else {
		bustest.Provision(t, pub, rc.ConsumerSpec())
	}
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()

	connA := bustest.Connect(t, srv, "hung-a")
	got := make(chan struct{}, 1)
	a := rc
	a.Replica = "hung-a"
	ra := startRunner(t, connA, a, func(ctx context.Context, d *bus.Delivery) error {
		got <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	publishAll(t, pub, []*eventsv1.Envelope{podEvent("stuck", "stuck", 1)})
	select {
	case <-got:
	case <-time.After(bustest.Timeout):
		t.Fatal("replica a never received the message")
	}

	obs := &recorder{}
	b := rc
	b.Replica = "hung-b"
	b.Observer = obs
	startB := func() {
		startRunner(t, bustest.Connect(t, srv, "hung-b"), b, func(ctx context.Context, d *bus.Delivery) error {
			t.Errorf("message redelivered past MaxDeliver: %v", d.Envelope)
			return nil
		})
	}
	if !durable {
		// b listens for advisories before a dies.
		startB()
		bustest.Eventually(t, "replica b to pull", func() bool {
			return consumerInfo(t, pub, bus.EventsStream, "hung").NumWaiting >= 2
		})
	}
	connA.NATS().Close()
	_ = ra.stop(t)
	if durable {
		// Nobody is alive when the advisory is published; it waits in
		// its stream.
		adv, err := pub.JetStream().Stream(ctx, bus.AdvisoriesStream)
		if err != nil {
			t.Fatal(err)
		}
		bustest.Eventually(t, "the advisory to be stored", func() bool {
			info, err := adv.Info(ctx)
			return err == nil && info.State.Msgs == 1
		})
		startB()
	}

	dlq, err := pub.JetStream().Stream(ctx, bus.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	var raw *jetstream.RawStreamMsg
	bustest.Eventually(t, "the advisory's dead letter", func() bool {
		raw, err = dlq.GetMsg(ctx, 1)
		return err == nil
	})
	env, err := bus.DecodeEnvelope(raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	dl := env.GetDeadLetter()
	if dl.Code != bus.CodeMaxDeliver || dl.StreamSeq != 1 || env.PodUid != "stuck" || env.Replica != "hung-b" || dl.Subject != "podflow.pod.PodPersisted.~.default.stuck" {
		t.Fatalf("dead letter %v / %v", env, dl)
	}
	bustest.Eventually(t, "the observer", func() bool { return obs.count(bus.OutcomeDeadLettered) == 1 })
	if durable {
		bustest.Eventually(t, "the advisory to be acked", func() bool {
			i := consumerInfo(t, pub, bus.AdvisoriesStream, "hung-maxdeliver")
			return i.NumPending == 0 && i.NumAckPending == 0
		})
	}
}

func TestRunnerDrainLosesNothing(t *testing.T) {
	srv := bustest.Server(t)
	pub := bustest.Connect(t, srv, "publisher")
	rc := testRunnerConfig("drain")
	rc.Concurrency = 8
	rc.AckWait = 2 * time.Second
	bustest.Provision(t, pub, rc.ConsumerSpec())

	const n = 300
	publishAll(t, pub, podEvents(n))

	handled := newCounter()
	acked := newCounter()
	observer := func(replica string) bus.ObserverFunc {
		return func(o bus.Observation) {
			if o.Outcome == bus.OutcomeAcked {
				acked.add(replica, fmt.Sprint(o.StreamSeq))
			}
			if o.Outcome == bus.OutcomeAckFailed || o.Outcome == bus.OutcomeDeadLettered {
				t.Errorf("unexpected outcome %v", o)
			}
		}
	}
	h := func(ctx context.Context, d *bus.Delivery) error {
		time.Sleep(2 * time.Millisecond)
		handled.add(d.Replica, d.Envelope.PodUid)
		return nil
	}
	first := rc
	first.Replica, first.Observer = "drain-1", observer("drain-1")
	r1 := startRunner(t, bustest.Connect(t, srv, "drain-1"), first, h)
	bustest.Eventually(t, "a part of the burst", func() bool { return handled.distinct() >= n/4 })
	if err := r1.stop(t); err != nil { // mid-burst
		t.Fatalf("Run: %v", err)
	}
	if d := handled.distinct(); d == n {
		t.Fatalf("the first runner handled everything (%d) before the drain; the test proves nothing", d)
	}

	second := rc
	second.Replica, second.Observer = "drain-2", observer("drain-2")
	r2 := startRunner(t, bustest.Connect(t, srv, "drain-2"), second, h)
	bustest.Eventually(t, "every message", func() bool { return handled.distinct() == n })
	settled(t, pub, "drain")
	if err := r2.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	handled.exactlyOnce(t, n)
	acked.exactlyOnce(t, n)
}

func TestRunnerNodeFilter(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "node-agent")
	rc := testRunnerConfig("nodeagent-n1_example")
	rc.FilterSubjects = []string{bus.TypeNodeFilter("PodScheduled", "n1.example")}
	bustest.Provision(t, conn, rc.ConsumerSpec())

	var mu sync.Mutex
	var seen []string
	startRunner(t, conn, rc, func(ctx context.Context, d *bus.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, d.Envelope.PodName)
		return nil
	})
	var envs []*eventsv1.Envelope
	for i, node := range []string{"n1.example", "n2", "n1.example", "n1-example", ""} {
		e := &eventsv1.Envelope{PodUid: fmt.Sprint(i), Namespace: "default", PodName: fmt.Sprintf("%d-%s", i, node), NodeName: node,
			Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: node}}}
		envs = append(envs, e)
	}
	publishAll(t, conn, envs)
	// Wait for the two of n1.example first: the server may count a stored
	// message into the consumer's pending ones only after the PubAck, so
	// the counts alone can look settled before any delivery.
	bustest.Eventually(t, "the node agent of n1.example to see its two pods", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= 2
	})
	settled(t, conn, rc.Consumer)
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(seen)
	if len(seen) != 2 || seen[0] != "0-n1.example" || seen[1] != "2-n1.example" {
		t.Fatalf("node agent of n1.example saw %v", seen)
	}
}

func TestRunnerRefusesMismatchedConsumer(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "mismatch")
	rc := testRunnerConfig("mismatch")
	bustest.Provision(t, conn, rc.ConsumerSpec())
	rc.MaxDeliver++
	r, err := bus.NewRunner(conn, rc, func(context.Context, *bus.Delivery) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, bus.ErrInvalid) {
		t.Fatalf("Run over a consumer with another MaxDeliver: %v, want ErrInvalid", err)
	}
	if err := r.Run(ctx); !errors.Is(err, bus.ErrRunnerStarted) {
		t.Fatalf("second Run: %v, want ErrRunnerStarted", err)
	}
}

func TestRunnerInProgressKeepsLongHandlers(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "long")
	rc := testRunnerConfig("long")
	// The margin between two progress reports and the AckWait (1.5 s) is
	// what a loaded 2-core machine may stall a goroutine for; with 300 ms
	// the message was redelivered at load 40.
	rc.AckWait = 2 * time.Second
	bustest.Provision(t, conn, rc.ConsumerSpec())

	var calls atomic.Int32
	startRunner(t, conn, rc, func(ctx context.Context, d *bus.Delivery) error {
		calls.Add(1)
		// Two and a half AckWaits of work, reporting progress.
		for i := 0; i < 10; i++ {
			time.Sleep(500 * time.Millisecond)
			if err := d.InProgress(); err != nil {
				return err
			}
		}
		return nil
	})
	publishAll(t, conn, []*eventsv1.Envelope{podEvent("slow", "slow", 1)})
	bustest.Eventually(t, "the handler to start", func() bool { return calls.Load() >= 1 }) // see TestRunnerNodeFilter
	settled(t, conn, "long")
	if n := calls.Load(); n != 1 {
		t.Fatalf("long handler called %d times, want 1", n)
	}
	if info := consumerInfo(t, conn, bus.EventsStream, "long"); info.AckFloor.Stream != 1 {
		t.Fatalf("ack floor %d, want 1", info.AckFloor.Stream)
	}
}

func TestRunnerAcksHandlersFinishingAfterDrainTimeout(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "late")
	rc := testRunnerConfig("late")
	rc.DrainTimeout = 200 * time.Millisecond
	obs := &recorder{}
	rc.Observer = obs
	bustest.Provision(t, conn, rc.ConsumerSpec())

	started := make(chan struct{})
	var ctxCancelled atomic.Bool
	r := startRunner(t, conn, rc, func(ctx context.Context, d *bus.Delivery) error {
		close(started)
		time.Sleep(time.Second) // ignores ctx: a slow store write
		ctxCancelled.Store(ctx.Err() != nil)
		return nil
	})
	publishAll(t, conn, []*eventsv1.Envelope{podEvent("late", "late", 1)})
	<-started
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !ctxCancelled.Load() {
		t.Fatal("handler context was not cancelled after DrainTimeout")
	}
	if got := obs.outcomes(); len(got) != 1 || got[0] != bus.OutcomeAcked {
		t.Fatalf("outcomes %v, want one ack", got)
	}
	if info := consumerInfo(t, conn, bus.EventsStream, "late"); info.AckFloor.Stream != 1 || info.NumAckPending != 0 {
		t.Fatalf("ack floor %d, ack pending %d", info.AckFloor.Stream, info.NumAckPending)
	}
}

// TestRunnerConfirmsAcks: by default an ack counts once the server
// confirms it; an ack nobody takes (the consumer was deleted while the
// handler ran) is AckFailed, not Acked. AsyncAck does not wait.
func TestRunnerConfirmsAcks(t *testing.T) {
	for _, tt := range []struct {
		asyncAck bool
		want     bus.Outcome
	}{
		{asyncAck: false, want: bus.OutcomeAckFailed},
		{asyncAck: true, want: bus.OutcomeAcked},
	} {
		t.Run(fmt.Sprintf("AsyncAck=%v", tt.asyncAck), func(t *testing.T) {
			srv := bustest.Server(t)
			conn := bustest.Connect(t, srv, "confirm")
			rc := testRunnerConfig("confirm")
			rc.AsyncAck = tt.asyncAck
			rec := &recorder{}
			rc.Observer = rec
			bustest.Provision(t, conn, rc.ConsumerSpec())
			publishAll(t, conn, podEvents(1))
			rn := startRunner(t, conn, rc, func(ctx context.Context, d *bus.Delivery) error {
				return conn.JetStream().DeleteConsumer(ctx, rc.Stream, rc.Consumer)
			})
			bustest.Eventually(t, "the message to settle", func() bool { return len(rec.outcomes()) > 0 })
			if got := rec.outcomes(); got[0] != tt.want {
				t.Fatalf("outcomes %v, want %s first", got, tt.want)
			}
			_ = rn.stop(t) // fails: its consumer is gone
		})
	}
}

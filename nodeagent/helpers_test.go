package nodeagent_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	node    = "node-1"
	podCIDR = "10.244.1.0/24"
	waitFor = 20 * time.Second
)

// fastConfig shrinks every kubelet timing so that a test runs in
// milliseconds; ratios between timings are kept.
func fastConfig() nodeagent.Config {
	cfg := nodeagent.DefaultConfig(node, podCIDR)
	cfg.HostIP = "172.16.0.1"
	cfg.SpecSecond = 10 * time.Millisecond
	cfg.HeartbeatInterval = 20 * time.Millisecond
	cfg.ResyncPeriod = time.Hour // tests call Reconcile themselves
	cfg.PublishRetry = 5 * time.Millisecond
	cfg.CrashLoopBackOff = nodeagent.Backoff{Initial: 20 * time.Millisecond, Max: 160 * time.Millisecond, ResetAfter: time.Minute}
	cfg.ImagePullBackOff = nodeagent.Backoff{Initial: 40 * time.Millisecond, Max: 320 * time.Millisecond}
	cfg.SetupBackOff = nodeagent.Backoff{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	cfg.DefaultGracePeriod = 300 * time.Millisecond
	cfg.EvictionPeriod = 20 * time.Millisecond
	return cfg
}

type env struct {
	t     *testing.T
	agent *nodeagent.Agent
	rt    *sim.Runtime
	store *nodeagenttest.Store
	pub   *nodeagenttest.Publisher
}

func newEnv(t *testing.T) *env {
	t.Helper()
	rt, err := sim.New(sim.DefaultConfig(podCIDR))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, rt: rt, store: nodeagenttest.NewStore(), pub: nodeagenttest.NewPublisher()}
	e.agent = e.newAgent()
	t.Cleanup(rt.Close)
	return e
}

// fakeClockEnv is an env on clock with kubelet's own timings (the
// defaults), its agent over wrap(e.store) (nil: e.store), stopped when the
// test ends.
func fakeClockEnv(t *testing.T, clock *nodeagenttest.FakeClock, wrap func(*nodeagenttest.Store) nodeagent.NodeStore) *env {
	t.Helper()
	rcfg := sim.DefaultConfig(podCIDR)
	rcfg.Clock = clock
	rt, err := sim.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	cfg := nodeagent.DefaultConfig(node, podCIDR)
	cfg.Clock = clock
	e := &env{t: t, rt: rt, store: nodeagenttest.NewStore(), pub: nodeagenttest.NewPublisher()}
	var store nodeagent.NodeStore = e.store
	if wrap != nil {
		store = wrap(e.store)
	}
	if e.agent, err = nodeagent.New(cfg, rt, store, e.pub); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.agent.Stop)
	if err := e.agent.Start(e.ctx()); err != nil {
		t.Fatal(err)
	}
	return e
}

// newAgent starts an agent over e's runtime, store and publisher.
func (e *env) newAgent() *nodeagent.Agent {
	e.t.Helper()
	a, err := nodeagent.New(fastConfig(), e.rt, e.store, e.pub)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(a.Stop)
	if err := a.Start(e.ctx()); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// useRuntime replaces e's agent by one over rt (a wrapper of e.rt).
func (e *env) useRuntime(rt nodeagent.Runtime) {
	e.t.Helper()
	e.replaceAgent(fastConfig(), rt, e.store)
}

// replaceAgent stops e's agent and starts one with cfg over rt and store
// (e.rt and e.store, or wrappers of them) in its place.
func (e *env) replaceAgent(cfg nodeagent.Config, rt nodeagent.Runtime, store nodeagent.NodeStore) *nodeagent.Agent {
	e.t.Helper()
	e.agent.Stop()
	a, err := nodeagent.New(cfg, rt, store, e.pub)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(a.Stop)
	if err := a.Start(e.ctx()); err != nil {
		e.t.Fatal(err)
	}
	e.agent = a
	return a
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) bind(p *corev1.Pod) {
	e.t.Helper()
	e.store.PutPod(p)
	if err := e.agent.HandlePodBound(e.ctx(), p); err != nil {
		e.t.Fatal(err)
	}
}

// waitEnvs waits until cond holds over the pod's envelopes and returns them.
func (e *env) waitEnvs(uid, what string, cond func([]*eventsv1.Envelope) bool) []*eventsv1.Envelope {
	e.t.Helper()
	var got []*eventsv1.Envelope
	err := e.pub.Wait(e.ctx(), func(all []*eventsv1.Envelope) bool {
		got = got[:0]
		for _, x := range all {
			if x.GetPodUid() == uid {
				got = append(got, x)
			}
		}
		return cond(got)
	})
	if err != nil {
		e.t.Fatalf("waiting for %s: %v\nlast status: %v", what, err, lastStatus(got))
	}
	return got
}

// waitStatus waits until the pod's latest reported status satisfies cond.
func (e *env) waitStatus(uid, what string, cond func(*corev1.PodStatus) bool) *corev1.PodStatus {
	e.t.Helper()
	return lastStatus(e.waitEnvs(uid, what, func(envs []*eventsv1.Envelope) bool {
		st := lastStatus(envs)
		return st != nil && cond(st)
	}))
}

// waitReady waits for the pod's PodReady event.
func (e *env) waitReady(uid string) []*eventsv1.Envelope {
	e.t.Helper()
	return e.waitEnvs(uid, "PodReady", func(envs []*eventsv1.Envelope) bool { return len(ofType(envs, "PodReady")) > 0 })
}

func lastStatus(envs []*eventsv1.Envelope) *corev1.PodStatus {
	for i := len(envs) - 1; i >= 0; i-- {
		if r := envs[i].GetPodStatusReport(); r != nil {
			return r.GetStatus()
		}
	}
	return nil
}

func ofType(envs []*eventsv1.Envelope, typ eventsv1.Type) []*eventsv1.Envelope {
	var out []*eventsv1.Envelope
	for _, x := range envs {
		if x.Type() == typ {
			out = append(out, x)
		}
	}
	return out
}

func records(envs []*eventsv1.Envelope) []*eventsv1.EventRecord {
	var out []*eventsv1.EventRecord
	for _, x := range envs {
		out = append(out, x.GetPodStatusReport().GetEvents()...)
	}
	return out
}

func hasRecord(envs []*eventsv1.Envelope, typ, reason, substr string) bool {
	for _, r := range records(envs) {
		if r.GetType() == typ && r.GetReason() == reason && strings.Contains(r.GetMessage(), substr) {
			return true
		}
	}
	return false
}

func cond(st *corev1.PodStatus, typ string) *corev1.PodCondition {
	for _, c := range st.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

func waiting(st *corev1.PodStatus) string {
	if len(st.GetContainerStatuses()) == 0 {
		return ""
	}
	return st.GetContainerStatuses()[0].GetState().GetWaiting().GetReason()
}

func inCIDR(t *testing.T, ip string) {
	t.Helper()
	a, err := netip.ParseAddr(ip)
	if err != nil || !netip.MustParsePrefix(podCIDR).Contains(a) {
		t.Fatalf("pod IP %q is not in %s", ip, podCIDR)
	}
}

type podOpt func(*corev1.Pod)

func annotate(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		for i := 0; i+1 < len(kv); i += 2 {
			p.Metadata.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func restartPolicy(pol string) podOpt { return func(p *corev1.Pod) { p.Spec.RestartPolicy = pol } }

func newPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name, Annotations: map[string]string{}},
		Spec: &corev1.PodSpec{
			NodeName:   node,
			Containers: []*corev1.Container{{Name: "app", Image: "nginx:1.27"}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// checkSeq asserts what every envelope about a pod must satisfy: reports
// with strictly increasing seq (= generation), every other event carrying
// the seq of the report before it (the store reflects the event once that
// report is applied), deterministic unique ids, and the agent's identity.
func checkSeq(t *testing.T, envs []*eventsv1.Envelope) {
	t.Helper()
	ids := map[string]bool{}
	var prev int64
	for _, x := range envs {
		if r := x.GetPodStatusReport(); r != nil {
			if x.GetGeneration() <= prev {
				t.Fatalf("report seq not increasing: %d after %d (%s)", x.GetGeneration(), prev, x.GetId())
			}
			prev = x.GetGeneration()
			if r.GetSeq() != x.GetGeneration() {
				t.Fatalf("report seq %d != generation %d", r.GetSeq(), x.GetGeneration())
			}
		} else if x.Type() != "PodDeleted" && x.GetGeneration() != prev {
			t.Fatalf("%s carries seq %d, the report before it %d (%s)", x.Type(), x.GetGeneration(), prev, x.GetId())
		}
		if ids[x.GetId()] {
			t.Fatalf("duplicate id %q", x.GetId())
		}
		ids[x.GetId()] = true
		if x.GetStage() != nodeagent.Stage || x.GetReplica() != node || x.GetNodeName() != node ||
			x.GetNamespace() != "default" || x.GetPodName() == "" {
			t.Fatalf("bad envelope identity: %v", x)
		}
	}
}

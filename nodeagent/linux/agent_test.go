package linux_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// agentConfig is the kubelet's configuration with short timings: a spec
// second of 100 ms, CrashLoopBackOff from 300 ms, volumes re-synced every
// 200 ms.
func agentConfig(cfg nodeagentCfg) nodeagent.Config {
	c := nodeagent.DefaultConfig(cfg.node, cfg.cidr)
	c.SpecSecond = 100 * time.Millisecond
	c.HeartbeatInterval = time.Second
	c.ResyncPeriod = time.Hour
	c.SyncPeriod = 200 * time.Millisecond // volume re-syncs
	c.PublishRetry = 50 * time.Millisecond
	c.CrashLoopBackOff = nodeagent.Backoff{Initial: 300 * time.Millisecond, Max: 2400 * time.Millisecond, ResetAfter: time.Minute}
	c.SetupBackOff = nodeagent.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	c.DefaultGracePeriod = time.Second
	return c
}

type nodeagentCfg struct{ node, cidr string }

// runAgent drives e's runtime with the real agent core and in-memory
// store and publisher.
func runAgent(t *testing.T, e *env) (*nodeagent.Agent, *nodeagenttest.Store, *nodeagenttest.Publisher) {
	t.Helper()
	return runAgentWith(t, e, nodeagenttest.NewStore())
}

// runAgentWith is runAgent over store (an agent restarted on it).
func runAgentWith(t *testing.T, e *env, store *nodeagenttest.Store) (*nodeagent.Agent, *nodeagenttest.Store, *nodeagenttest.Publisher) {
	t.Helper()
	pub := nodeagenttest.NewPublisher()
	a, err := nodeagent.New(agentConfig(nodeagentCfg{e.cfg.NodeName, e.cfg.Network.PodCIDR}), e.rt, store, pub)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	if err := a.Start(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	return a, store, pub
}

func count(envs []*eventsv1.Envelope, typ eventsv1.Type) int {
	n := 0
	for _, e := range envs {
		if e.Type() == typ {
			n++
		}
	}
	return n
}

func times(envs []*eventsv1.Envelope, typ eventsv1.Type) []time.Time {
	var out []time.Time
	for _, e := range envs {
		if e.Type() == typ {
			out = append(out, e.GetTime().AsTime())
		}
	}
	return out
}

// A container exiting 1 under OnFailure is restarted, with a growing
// delay (CrashLoopBackOff); each run has its own log.
func TestOnFailureRestartsWithBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, store, pub := runAgent(t, e)
	pd := newPod(e.cfg.NodeName, "crasher", "sh", "-c", "echo run; exit 1")
	pd.Spec.RestartPolicy = "OnFailure"
	store.PutPod(pd)
	ctx := ctxT(t, 30*time.Second)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	uid := pd.Metadata.Uid
	if err := pub.Wait(ctx, func(envs []*eventsv1.Envelope) bool { return count(envs, "ContainerStarted") >= 3 }); err != nil {
		t.Fatal(err)
	}
	envs := pub.Pod(uid)
	for _, env := range envs {
		if ex := env.GetContainerExited(); ex != nil && ex.GetExitCode() != 1 {
			t.Fatalf("exit = %+v, want code 1", ex)
		}
	}
	starts, exits := times(envs, "ContainerStarted"), times(envs, "ContainerExited")
	if len(exits) < 2 {
		t.Fatalf("exits: %v", exits)
	}
	first, second := starts[1].Sub(exits[0]), starts[2].Sub(exits[1])
	if first < 300*time.Millisecond || second < 600*time.Millisecond {
		t.Fatalf("restart delays %s, %s; want ≥ 300ms then ≥ 600ms (CrashLoopBackOff)", first, second)
	}
	backoff := false
	for _, env := range envs {
		for _, r := range env.GetPodStatusReport().GetEvents() {
			backoff = backoff || r.GetReason() == "BackOff"
		}
	}
	if !backoff {
		t.Error("no BackOff event recorded")
	}
	// The third start removed the first instance, with its log (kubelet's
	// container GC keeps one exited instance); the second's remains.
	logs := filepath.Join(e.cfg.DataDir, "pods", uid, "logs", "main")
	if got := readFile(filepath.Join(logs, "1.log")); !strings.Contains(got, "stdout F run") {
		t.Errorf("log 1.log = %q", got)
	}
	if _, err := os.Stat(filepath.Join(logs, "0.log")); !os.IsNotExist(err) {
		t.Errorf("the first instance's log remains after the third start: %v", err)
	}
}

// A readiness probe follows the container's health: the test takes the
// served file away and back through a hostPath volume.
func TestReadinessFlips(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, store, pub := runAgent(t, e)
	www := t.TempDir()
	pd := newPod(e.cfg.NodeName, "ready", "httpd", "-f", "-p", "8080", "-h", "/www")
	c := pd.Spec.Containers[0]
	c.VolumeMounts = []*corev1.VolumeMount{{Name: "www", MountPath: "/www", ReadOnly: true}}
	c.ReadinessProbe = &corev1.Probe{HttpGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intOrString(8080)},
		PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1}
	pd.Spec.Volumes = []*corev1.Volume{{Name: "www", HostPath: &corev1.HostPathVolumeSource{Path: www, Type: "Directory"}}}
	store.PutPod(pd)
	ctx := ctxT(t, 40*time.Second)
	healthy := func(ok bool) {
		t.Helper()
		p := filepath.Join(www, "healthz")
		if ok {
			if err := os.WriteFile(p, []byte("ok\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	healthy(true)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	uid := pd.Metadata.Uid
	waitCount := func(typ eventsv1.Type, n int) {
		t.Helper()
		err := pub.Wait(ctx, func([]*eventsv1.Envelope) bool { return count(pub.Pod(uid), typ) >= n })
		if err != nil {
			for _, env := range pub.Pod(uid) {
				t.Logf("%s %s %v", env.GetTime().AsTime().Format("15:04:05.000"), env.Type(), env.GetPodStatusReport().GetEvents())
			}
			t.Fatalf("waiting for %d %s: %v", n, typ, err)
		}
	}
	waitCount("PodReady", 1)
	for range 2 {
		notReady, ready := count(pub.Pod(uid), "PodNotReady"), count(pub.Pod(uid), "PodReady")
		healthy(false)
		waitCount("PodNotReady", notReady+1)
		healthy(true)
		waitCount("PodReady", ready+1)
	}
}

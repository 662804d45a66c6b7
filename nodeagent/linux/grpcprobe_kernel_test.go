package linux_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/network"
	"github.com/podflow/podflow/nodeagent/linux/network/networktest"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// hasEvent reports whether envs record an Event with reason whose message
// contains substr.
func hasEvent(envs []*eventsv1.Envelope, reason, substr string) bool {
	for _, env := range envs {
		for _, r := range env.GetPodStatusReport().GetEvents() {
			if r.GetReason() == reason && strings.Contains(r.GetMessage(), substr) {
				return true
			}
		}
	}
	return false
}

// podWaiter returns a wait for a condition over the envelopes of pod uid;
// on a timeout it logs them and fails t.
func podWaiter(t *testing.T, ctx context.Context, pub *nodeagenttest.Publisher, uid string) func(what string, cond func([]*eventsv1.Envelope) bool) {
	return func(what string, cond func([]*eventsv1.Envelope) bool) {
		t.Helper()
		if err := pub.Wait(ctx, func([]*eventsv1.Envelope) bool { return cond(pub.Pod(uid)) }); err != nil {
			for _, env := range pub.Pod(uid) {
				t.Logf("%s %s %v", env.GetTime().AsTime().Format("15:04:05.000"), env.Type(), env.GetPodStatusReport().GetEvents())
			}
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
}

// bindPod stores pd and binds it to a; it returns the test's context (60
// s), the pod's UID and a podWaiter for it.
func bindPod(t *testing.T, a *nodeagent.Agent, store *nodeagenttest.Store, pub *nodeagenttest.Publisher, pd *corev1.Pod) (context.Context, string, func(string, func([]*eventsv1.Envelope) bool)) {
	t.Helper()
	store.PutPod(pd)
	ctx := ctxT(t, 60*time.Second)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	return ctx, pd.Metadata.Uid, podWaiter(t, ctx, pub, pd.Metadata.Uid)
}

// gRPC probes on the kernel: a real grpc.health.v1 server listening inside
// the pod's network namespace (on the pod IP, as a container's server
// would) answers the agent's readiness and liveness probes. A named
// service going NOT_SERVING makes the pod not ready, with kubelet's
// Unhealthy message; the liveness service going NOT_SERVING kills and
// restarts the container.
func TestGRPCProbesOnTheKernel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, store, pub := runAgent(t, e)
	pd := newPod(e.cfg.NodeName, "grpc", "sleep", "3600")
	c := pd.Spec.Containers[0]
	app, live := "app", "live"
	c.ReadinessProbe = &corev1.Probe{Grpc: &corev1.GRPCAction{Port: 9090, Service: &app},
		PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1, TimeoutSeconds: 1}
	c.LivenessProbe = &corev1.Probe{Grpc: &corev1.GRPCAction{Port: 9090, Service: &live},
		PeriodSeconds: 1, FailureThreshold: 2, TimeoutSeconds: 1}
	ctx, uid, wait := bindPod(t, a, store, pub, pd)
	// The sandbox exists before any container starts: serve in its netns.
	wait("the sandbox", func(envs []*eventsv1.Envelope) bool { return count(envs, "PodSandboxReady") > 0 })
	paths, err := filepath.Glob(filepath.Join(network.NetnsDir, "*"+uid))
	if err != nil || len(paths) != 1 {
		t.Fatalf("netns of pod %s: %v %v", uid, paths, err)
	}
	var ln net.Listener
	if err := networktest.Do(paths[0], func() (err error) {
		ln, err = net.Listen("tcp", ":9090")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	hs.SetServingStatus(app, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(live, healthpb.HealthCheckResponse_SERVING)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-served })

	wait("PodReady", func(envs []*eventsv1.Envelope) bool { return count(envs, "PodReady") > 0 })
	hs.SetServingStatus(app, healthpb.HealthCheckResponse_NOT_SERVING)
	wait("PodNotReady", func(envs []*eventsv1.Envelope) bool { return count(envs, "PodNotReady") > 0 })
	// Waited for, not looked up once: on a loaded machine a probe may
	// first time out (its own Unhealthy message), and the report holding
	// the event may follow PodNotReady.
	wait(`Unhealthy "Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")"`, func(envs []*eventsv1.Envelope) bool {
		return hasEvent(envs, "Unhealthy", `Readiness probe failed: service unhealthy (responded with "NOT_SERVING")`)
	})
	hs.SetServingStatus(app, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(live, healthpb.HealthCheckResponse_NOT_SERVING)
	wait("the liveness restart", func(envs []*eventsv1.Envelope) bool {
		for _, env := range envs {
			if env.GetContainerStarted().GetRestartCount() == 1 {
				return true
			}
		}
		return false
	})
	for reason, msg := range map[string]string{
		"Unhealthy": `Liveness probe failed: service unhealthy (responded with "NOT_SERVING")`,
		"Killing":   "Container main failed liveness probe, will be restarted",
	} {
		wait(fmt.Sprintf("%s %q", reason, msg), func(envs []*eventsv1.Envelope) bool { return hasEvent(envs, reason, msg) })
	}
	hs.SetServingStatus(live, healthpb.HealthCheckResponse_SERVING)
	if err := a.HandlePodDelete(ctx, pd, time.Second); err != nil {
		t.Fatal(err)
	}
	wait("PodDeleted", func(envs []*eventsv1.Envelope) bool { return count(envs, "PodDeleted") > 0 })
}

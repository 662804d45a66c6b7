package nodemetrics

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// wrappedSim is a sim runtime wrapped by m, closed with the test.
func wrappedSim(t *testing.T, m *Metrics) (*sim.Runtime, nodeagent.Runtime) {
	t.Helper()
	rt, err := sim.New(sim.DefaultConfig("10.244.7.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	return rt, m.Runtime(rt)
}

func TestRuntimeOperationsAndPodStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	_, wrapped := wrappedSim(t, m)
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "default", Uid: "u1"}, Spec: &corev1.PodSpec{}}
	ctx := context.Background()
	if _, err := wrapped.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := wrapped.RemovePodSandbox(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.ops); n != 2 {
		t.Fatalf("%d runtime operation series, want 2 (run and remove)", n)
	}

	// A binding reaches the node, then the pod runs: one pod start.
	h := m.Handler(func(context.Context, *bus.Delivery) error { return nil })
	sched, _ := bus.NewEnvelope(&eventsv1.PodScheduled{NodeName: "n"})
	sched.PodUid = "u1"
	if err := h(ctx, &bus.Delivery{Envelope: sched}); err != nil {
		t.Fatal(err)
	}
	pub := m.Publisher(nodeagenttest.NewPublisher())
	running, _ := bus.NewEnvelope(&eventsv1.PodRunning{})
	running.PodUid, running.Id = "u1", "uid/u1/PodRunning/g1/a1"
	if err := pub.Publish(ctx, running); err != nil {
		t.Fatal(err)
	}
	if got := testutil.CollectAndCount(m.podStart); got != 1 {
		t.Fatalf("pod start histogram series %d", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kubelet_pod_start_sli_duration_seconds" && mf.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
			t.Fatalf("pod starts observed: %d, want 1", mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	// A second PodRunning (a restart, a redelivery) observes nothing more.
	if err := pub.Publish(ctx, running); err != nil {
		t.Fatal(err)
	}
	mfs, _ = reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "kubelet_pod_start_sli_duration_seconds" && mf.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
			t.Fatalf("pod start observed twice")
		}
	}
}

// The wrapper passes the runtime's volume meter through, so the agent's
// emptyDir sizeLimit eviction works behind it.
func TestRuntimePassesVolumeUsage(t *testing.T) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rt, wrapped := wrappedSim(t, m)
	vm, ok := wrapped.(nodeagent.VolumeMeter)
	if !ok {
		t.Fatal("the wrapped runtime is no VolumeMeter")
	}
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "default", Uid: "u1"}, Spec: &corev1.PodSpec{}}
	ctx := context.Background()
	if _, err := wrapped.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	vol := &corev1.Volume{Name: "cache", EmptyDir: &corev1.EmptyDirVolumeSource{}}
	if err := wrapped.MountVolumes(ctx, pod, []nodeagent.VolumeData{{Volume: vol}}); err != nil {
		t.Fatal(err)
	}
	if err := rt.SetVolumeUsage("u1", "cache", 4096); err != nil {
		t.Fatal(err)
	}
	if n, err := vm.VolumeUsage(ctx, pod, "cache"); err != nil || n != 4096 {
		t.Errorf("usage %d, %v; want 4096", n, err)
	}
}

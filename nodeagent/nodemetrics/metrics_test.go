package nodemetrics

import (
	"context"
	"errors"
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
	// The agent's PodRunning travels as a step of its PodStatusReport.
	running, _ := bus.NewEnvelope(&eventsv1.PodRunning{})
	running.PodUid, running.Id = "u1", "uid/u1/PodRunning/g1/a1"
	report, _ := bus.NewEnvelope(&eventsv1.PodStatusReport{Seq: 1, Steps: []*eventsv1.Envelope{{Id: running.Id, Payload: running.Payload}}})
	report.PodUid, report.Id = "u1", "uid/u1/PodStatusReport/g1/a1"
	if err := pub.Publish(ctx, report); err != nil {
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

// optionalRuntime implements every optional runtime interface and records
// which reached it (the rest of nodeagent.Runtime is nil: not called).
type optionalRuntime struct {
	nodeagent.Runtime
	called map[string]bool
}

func (o optionalRuntime) RuntimeVersion() string { o.called["RuntimeVersion"] = true; return "x://1" }
func (o optionalRuntime) NodeImages() []*corev1.ContainerImage {
	o.called["NodeImages"] = true
	return nil
}
func (o optionalRuntime) PullImageWithSecrets(context.Context, *corev1.Pod, string, string, []*corev1.Secret) (nodeagent.ImageRef, error) {
	o.called["PullImageWithSecrets"] = true
	return nodeagent.ImageRef{}, nil
}
func (o optionalRuntime) TerminationMessage(context.Context, string, nodeagent.ContainerID, int) ([]byte, bool, error) {
	o.called["TerminationMessage"] = true
	return nil, false, nil
}
func (o optionalRuntime) LogTail(context.Context, string, nodeagent.ContainerID, int, int) ([]byte, error) {
	o.called["LogTail"] = true
	return nil, nil
}
func (o optionalRuntime) VolumeUsage(context.Context, *corev1.Pod, string) (int64, error) {
	o.called["VolumeUsage"] = true
	return 0, nil
}
func (o optionalRuntime) StartEphemeralContainer(context.Context, *corev1.Pod, *corev1.Container, nodeagent.Sandbox, nodeagent.ContainerID) (nodeagent.ContainerID, error) {
	o.called["StartEphemeralContainer"] = true
	return "", nil
}

// TestRuntimeKeepsOptionalInterfaces: every optional interface of the
// wrapped runtime reaches it through the wrapper — the Linux node runs
// wrapped, so one the wrapper hid would switch imagePullSecrets,
// termination messages, emptyDir eviction or kubectl debug off there.
func TestRuntimeKeepsOptionalInterfaces(t *testing.T) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	inner := optionalRuntime{called: map[string]bool{}}
	rt := m.Runtime(inner)
	ctx := context.Background()
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Uid: "u"}}
	calls := map[string]func() bool{
		"RuntimeVersion": func() bool { v, ok := rt.(nodeagent.RuntimeVersioner); return ok && v.RuntimeVersion() != "" },
		"NodeImages":     func() bool { v, ok := rt.(nodeagent.ImageLister); return ok && v.NodeImages() == nil },
		"PullImageWithSecrets": func() bool {
			v, ok := rt.(nodeagent.SecretPuller)
			return ok && func() bool { _, err := v.PullImageWithSecrets(ctx, pod, "i", "Always", nil); return err == nil }()
		},
		"TerminationMessage": func() bool {
			v, ok := rt.(nodeagent.TerminationMessageReader)
			return ok && func() bool { _, _, err := v.TerminationMessage(ctx, "u", "c", 1); return err == nil }()
		},
		"LogTail": func() bool {
			v, ok := rt.(nodeagent.TerminationMessageReader)
			return ok && func() bool { _, err := v.LogTail(ctx, "u", "c", 1, 1); return err == nil }()
		},
		"VolumeUsage": func() bool {
			v, ok := rt.(nodeagent.VolumeMeter)
			return ok && func() bool { _, err := v.VolumeUsage(ctx, pod, "v"); return err == nil }()
		},
		"StartEphemeralContainer": func() bool {
			v, ok := rt.(nodeagent.EphemeralStarter)
			return ok && func() bool {
				_, err := v.StartEphemeralContainer(ctx, pod, &corev1.Container{}, nodeagent.Sandbox{}, "t")
				return err == nil
			}()
		},
	}
	for name, call := range calls {
		if !call() || !inner.called[name] {
			t.Errorf("%s does not reach the wrapped runtime", name)
		}
	}
	// Over a runtime that measures nothing the wrapper says so, so the
	// agent stops asking.
	bare := m.Runtime(struct{ nodeagent.Runtime }{})
	if _, err := bare.(nodeagent.VolumeMeter).VolumeUsage(ctx, pod, "v"); !errors.Is(err, nodeagent.ErrNoVolumeMeter) {
		t.Errorf("VolumeUsage over a runtime without a meter: %v, want ErrNoVolumeMeter", err)
	}
}

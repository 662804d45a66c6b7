package scheduler

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// informedPod is a pod as the pipeline bench leaves it: traced, admitted (default
// tolerations, the service account's token volume), bound and Running;
// unbound when node is "".
func informedPod(i int, node string) *corev1.Pod {
	now := timestamppb.New(time.Unix(1_800_000_000, 0))
	name := fmt.Sprintf("bench-%06d", i)
	var conds []*corev1.PodCondition
	for _, c := range []string{"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"} {
		conds = append(conds, &corev1.PodCondition{Type: c, Status: "True", LastTransitionTime: now})
	}
	thirty, prio := int64(30), int32(7)
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "bench", Uid: fmt.Sprintf("0b7e4d6c-1f2a-4c3b-9d8e-%012d", i),
			CreationTimestamp: now, Labels: map[string]string{"app": "bench", "run": "20000"}, Generation: 1,
			Annotations:   map[string]string{stage.AnnotationTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", stage.AnnotationRequestID: "0f3c9a2e-7d41-4b8e-a5c6-" + fmt.Sprintf("%012d", i)},
			ManagedFields: []*corev1.ManagedFieldsEntry{{Manager: "kubectl", Operation: "Update"}}},
		Spec: &corev1.PodSpec{NodeName: node, ServiceAccountName: "default", RestartPolicy: "Always",
			SchedulerName: "default-scheduler", DnsPolicy: "ClusterFirst", TerminationGracePeriodSeconds: &thirty, Priority: &prio,
			Containers: []*corev1.Container{{Name: "app", Image: "registry.local/pause:3.10", ImagePullPolicy: "IfNotPresent",
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File",
				Env:          []*corev1.EnvVar{{Name: "MODE", Value: "bench"}},
				Ports:        []*corev1.ContainerPort{{ContainerPort: 8080, HostPort: 18080, Protocol: "TCP"}},
				VolumeMounts: []*corev1.VolumeMount{{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
				Resources:    &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "10m", "memory": "16Mi"}}}},
			Volumes: []*corev1.Volume{{Name: "kube-api-access-x7k2p"}},
			Tolerations: []*corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: &thirty},
				{Key: "node.kubernetes.io/unreachable", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: &thirty}}},
		Status: &corev1.PodStatus{Phase: "Running", Conditions: conds, HostIp: "172.16.3.7", PodIp: "10.224.3.9", StartTime: now,
			QosClass: "Burstable",
			ContainerStatuses: []*corev1.ContainerStatus{{Name: "app", Ready: true, Image: "registry.local/pause:3.10",
				ImageId: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ContainerId: "sim://" + name + "-app",
				State: &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}},
	}
}

func storedPod(t testing.TB, p *corev1.Pod, rev int64) *raftstore.KV {
	t.Helper()
	v, err := vt.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return &raftstore.KV{Key: "/pods/" + p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName(), Value: v, ModRevision: rev}
}

// TestInformedPodDecoding: an unbound pod is cached whole (the scheduler
// binds by writing it back); a bound one keeps everything the scheduler
// reads of a bound pod — its cache entry, its identity, deletion and
// nomination, the conditions preemption and retries read, the trace's
// annotations — and loses the rest: images, env, mounts, volumes,
// tolerations, other annotations, owners,
// container statuses, managed fields.
func TestInformedPodDecoding(t *testing.T) {
	unbound := informedPod(1, "")
	var got corev1.Pod
	if err := decodeInformedPod(storedPod(t, unbound, 5), &got); err != nil {
		t.Fatal(err)
	}
	if objects.Revision(&got) != 5 {
		t.Errorf("unbound: revision %d, want 5", objects.Revision(&got))
	}
	want := proto.CloneOf(unbound)
	objects.SetRevision(want, 5)
	if !proto.Equal(&got, want) {
		t.Errorf("an unbound pod was not kept whole:\n got %v\nwant %v", &got, unbound)
	}

	bound := informedPod(2, "sim-node-0002")
	bound.Metadata.DeletionTimestamp = timestamppb.New(time.Unix(1_800_000_100, 0))
	bound.Metadata.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}",
		stage.AnnotationTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", stage.AnnotationRequestID: "req-1"}
	bound.Metadata.OwnerReferences = []*corev1.OwnerReference{{Kind: "ReplicaSet", Name: "web"}}
	bound.Status.NominatedNodeName = "sim-node-0003"
	bound.Status.Conditions = append(bound.Status.Conditions, &corev1.PodCondition{Type: framework.ConditionDisruptionTarget, Status: "True", Reason: framework.ReasonPreemptionByScheduler})
	var compact corev1.Pod
	if err := decodeInformedPod(storedPod(t, bound, 9), &compact); err != nil {
		t.Fatal(err)
	}
	if objects.Revision(&compact) != 9 {
		t.Errorf("bound: revision %d, want 9", objects.Revision(&compact))
	}
	full, err := framework.NewPodEntry(bound, "sim-node-0002")
	if err != nil {
		t.Fatal(err)
	}
	small, err := framework.NewPodEntry(&compact, "sim-node-0002")
	if err != nil {
		t.Fatal(err)
	}
	if small.Key != full.Key || small.Req != full.Req || small.NonZero != full.NonZero || fmt.Sprint(small.Ports) != fmt.Sprint(full.Ports) ||
		small.Meta.Priority != full.Meta.Priority || small.Meta.StartNano != full.Meta.StartNano ||
		small.Meta.Terminating != full.Meta.Terminating || small.Meta.Preempted != full.Meta.Preempted || fmt.Sprint(small.Meta.Labels) != fmt.Sprint(full.Meta.Labels) {
		t.Errorf("the cache entry of the compact pod differs:\n got %+v\nwant %+v", small, full)
	}
	if len(full.Ports) != 1 || !full.Meta.Preempted || full.Req.MilliCPU == 0 {
		t.Fatalf("the fixture does not exercise ports, preemption and requests: %+v", full)
	}
	if !proto.Equal(compact.Metadata, func() *corev1.ObjectMeta {
		m := proto.CloneOf(bound.Metadata)
		m.ManagedFields, m.OwnerReferences = nil, nil
		delete(m.Annotations, "kubectl.kubernetes.io/last-applied-configuration") // the trace's stay
		objects.SetRevision(&corev1.Pod{Metadata: m}, 9)
		return m
	}()) {
		t.Errorf("metadata: got %v", compact.Metadata)
	}
	if compact.Status.GetNominatedNodeName() != "sim-node-0003" || compact.Status.GetPhase() != "Running" || !compact.Status.GetStartTime().AsTime().Equal(bound.Status.StartTime.AsTime()) {
		t.Errorf("status: got %v", compact.Status)
	}
	c := compact.Spec.GetContainers()
	if len(c) != 1 || c[0].GetImage() != "" || c[0].GetEnv() != nil || c[0].GetVolumeMounts() != nil || compact.Spec.GetVolumes() != nil ||
		compact.Status.GetContainerStatuses() != nil {
		t.Errorf("a bound pod kept what the scheduler never reads: %v", &compact)
	}
	if compact.Spec.GetSchedulerName() != "default-scheduler" || compact.Spec.GetNodeName() != "sim-node-0002" || compact.Spec.GetTolerations() != nil {
		t.Errorf("spec: got %v", compact.Spec)
	}
	var conds []string
	for _, c := range compact.Status.GetConditions() {
		conds = append(conds, c.GetType())
	}
	if fmt.Sprint(conds) != "[PodScheduled DisruptionTarget]" || compact.Status.GetHostIp() != "" {
		t.Errorf("status: conditions %v, host IP %q; want [PodScheduled DisruptionTarget] and none", conds, compact.Status.GetHostIp())
	}
}

// BenchmarkInformedPodMemory: the heap the scheduler's pod informer holds
// per bound pod, decoded in full (objects.Decode) and as it decodes them
// (decodeInformedPod). The scale goal is at most 10 KB per pod for a
// whole process that caches pods; "bytes/pod" is this cache's share.
func BenchmarkInformedPodMemory(b *testing.B) {
	const pods = 2000
	kvs := make([]*raftstore.KV, pods)
	for i := range kvs {
		kvs[i] = storedPod(b, informedPod(i, fmt.Sprintf("sim-node-%04d", i%5000)), int64(i+1))
	}
	for _, bb := range []struct {
		name string
		dec  func(*raftstore.KV, objects.Object) error
	}{{"full", objects.Decode}, {"informed", decodeInformedPod}} {
		b.Run(bb.name, func(b *testing.B) {
			var held float64
			for b.Loop() {
				before := liveHeap()
				cache := make([]*corev1.Pod, pods)
				for i, kv := range kvs {
					cache[i] = &corev1.Pod{}
					if err := bb.dec(kv, cache[i]); err != nil {
						b.Fatal(err)
					}
				}
				held = float64(liveHeap()-before) / pods
				runtime.KeepAlive(cache)
			}
			b.ReportMetric(held, "bytes/pod")
		})
	}
}

func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

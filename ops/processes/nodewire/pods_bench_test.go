package nodewire

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// benchPod is a pod as the pipeline bench leaves it: admitted (default
// tolerations, service account volume), bound and Running; 20 pods to a
// node, as 100,000 pods on 5,000 nodes.
func benchPod(i int) *corev1.Pod {
	now := timestamppb.New(time.Unix(1_800_000_000, 0))
	name := fmt.Sprintf("bench-%06d", i)
	conds := []*corev1.PodCondition{}
	for _, c := range []string{"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"} {
		conds = append(conds, &corev1.PodCondition{Type: c, Status: "True", LastTransitionTime: now})
	}
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "bench", Uid: fmt.Sprintf("0b7e4d6c-1f2a-4c3b-9d8e-%012d", i),
			CreationTimestamp: now, Labels: map[string]string{"app": "bench", "run": "20000"}},
		Spec: &corev1.PodSpec{NodeName: fmt.Sprintf("sim-node-%04d", i/20), ServiceAccountName: "default", RestartPolicy: "Always",
			SchedulerName: "default-scheduler", DnsPolicy: "ClusterFirst", TerminationGracePeriodSeconds: ptr(int64(30)),
			Containers: []*corev1.Container{{Name: "app", Image: "registry.local/pause:3.10", ImagePullPolicy: "IfNotPresent",
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File",
				Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "10m", "memory": "16Mi"}}}},
			Tolerations: []*corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: ptr(int64(300))},
				{Key: "node.kubernetes.io/unreachable", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: ptr(int64(300))}}},
		Status: &corev1.PodStatus{Phase: "Running", Conditions: conds, HostIp: "172.16.3.7", PodIp: "10.224.3.9", StartTime: now,
			QosClass: "Burstable",
			ContainerStatuses: []*corev1.ContainerStatus{{Name: "app", Ready: true, Image: "registry.local/pause:3.10",
				ImageId: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ContainerId: "sim://" + name + "-app",
				State: &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}},
	}
}

// BenchmarkPodWatchCache: the heap a PodWatch's cache holds per pod, as
// objects.Decode (every field) and as watchDecoder (what the watch
// compares) leave it. The scale goal is at most 10 KB per pod for a whole
// process that caches pods; "bytes/pod" is this cache's share.
func BenchmarkPodWatchCache(b *testing.B) {
	const pods = 2000
	kvs := make([]*raftstore.KV, pods)
	for i := range kvs {
		v, err := vt.Marshal(benchPod(i))
		if err != nil {
			b.Fatal(err)
		}
		kvs[i] = &raftstore.KV{Key: fmt.Sprintf("/pods/bench/bench-%06d", i), Value: v, ModRevision: int64(i + 1)}
	}
	for _, bb := range []struct {
		name string
		dec  func(*raftstore.KV, objects.Object) error
	}{{"full", objects.Decode}, {"watched", (&watchDecoder{}).decode}} {
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

func ptr[T any](v T) *T { return &v }

// BenchmarkPodWatchDecode: the CPU of decoding one stored pod for the
// PodWatch's cache, as objects.Decode (every field) and as watchDecoder.
func BenchmarkPodWatchDecode(b *testing.B) {
	v, err := vt.Marshal(benchPod(1))
	if err != nil {
		b.Fatal(err)
	}
	kv := &raftstore.KV{Key: "/pods/bench/bench-000001", Value: v, ModRevision: 1}
	for _, bb := range []struct {
		name string
		dec  func(*raftstore.KV, objects.Object) error
	}{{"full", objects.Decode}, {"watched", (&watchDecoder{}).decode}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bb.dec(kv, &corev1.Pod{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkListedPodDecode: the CPU and allocation of decoding one
// listed pod for a reconcile, as objects.Decode (every field) and as
// decodeListedPod (of the status only what the agent reads, through a
// reused buffer).
func BenchmarkListedPodDecode(b *testing.B) {
	v, err := vt.Marshal(benchPod(1))
	if err != nil {
		b.Fatal(err)
	}
	kv := &raftstore.KV{Key: "/pods/bench/bench-000001", Value: v, ModRevision: 1}
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := objects.Decode(kv, &corev1.Pod{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("listed", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			if buf, err = decodeListedPod(kv, &corev1.Pod{}, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkListedNodeDecode: the CPU and allocation of decoding one
// listed node for a heartbeat, as objects.Decode (every field) and as
// decodeListedNode (name and status), for a simulated node as it
// registers.
func BenchmarkListedNodeDecode(b *testing.B) {
	now := timestamppb.New(time.Unix(1_800_000_000, 0))
	cond := func(typ, status, reason, msg string) *corev1.NodeCondition {
		return &corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	capacity := map[string]string{"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
	n := &corev1.Node{
		Metadata: &corev1.ObjectMeta{Name: "sim-node-0001", Uid: "0b7e4d6c-1f2a-4c3b-9d8e-000000000001", CreationTimestamp: now,
			Labels: map[string]string{"kubernetes.io/hostname": "sim-node-0001", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "sim"}},
		Spec: &corev1.NodeSpec{PodCidr: "10.244.1.0/24", PodCidrs: []string{"10.244.1.0/24"}},
		Status: &corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
			Conditions: []*corev1.NodeCondition{
				cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
				cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available")},
			Addresses: []*corev1.NodeAddress{{Type: "InternalIP", Address: "172.16.0.1"}, {Type: "Hostname", Address: "sim-node-0001"}},
			NodeInfo:  &corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "podflow", ContainerRuntimeVersion: "podflow://dev"}},
	}
	v, err := vt.Marshal(n)
	if err != nil {
		b.Fatal(err)
	}
	kv := &raftstore.KV{Key: "/registry/minions/sim-node-0001", Value: v, ModRevision: 1}
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := objects.Decode(kv, &corev1.Node{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("listed", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			if buf, err = decodeListedNode(kv, &corev1.Node{}, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCachedConfigMapRead: what a read of kube-root-ca.crt from the
// object cache allocates, as GetConfigMap (a copy of the caller's own)
// and as GetSharedConfigMap (the cache's own).
func BenchmarkCachedConfigMapRead(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := objects.FromKV(objectstest.New())
	cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "bench", Name: "kube-root-ca.crt", Uid: "0b7e4d6c-1f2a-4c3b-9d8e-000000000001",
		CreationTimestamp: timestamppb.New(time.Unix(1_800_000_000, 0)), Annotations: map[string]string{"kubernetes.io/description": "Contains a CA bundle"}},
		Data: map[string]string{"ca.crt": strings.Repeat("c", 1100)}}
	if _, err := st.Create(ctx, cm); err != nil {
		b.Fatal(err)
	}
	s := NewStore(st).WithObjectCache(ctx)
	s.RegisterPod(&corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "bench", Name: "p", Uid: "p"},
		Spec: &corev1.PodSpec{Volumes: []*corev1.Volume{{Name: "v", Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{Name: "kube-root-ca.crt"}}}}}}}})
	for _, bb := range []struct {
		name string
		get  func(context.Context, string, string) (*corev1.ConfigMap, error)
	}{{"copy", s.GetConfigMap}, {"shared", s.GetSharedConfigMap}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bb.get(ctx, "bench", "kube-root-ca.crt"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

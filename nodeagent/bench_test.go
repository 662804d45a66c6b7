package nodeagent_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
)

// readyCounter is a Publisher that only counts PodReady events, those
// carried inside a PodStatusReport included.
type readyCounter struct {
	mu    sync.Mutex
	ready int
	all   int
	cond  *sync.Cond
}

func (r *readyCounter) Publish(_ context.Context, env *eventsv1.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all++
	for _, e := range eventsv1.Unfold(env) { // PodReady travels inside a report
		if e.Type() == "PodReady" {
			r.ready++
			r.cond.Broadcast()
		}
	}
	return nil
}

// BenchmarkPodToReady measures the agent core's cost of taking a pod from
// HandlePodBound to PodReady on an instant simulated runtime (no delays, a
// publisher that only counts): the kubelet's bookkeeping, status building and
// envelope construction, per pod.
func BenchmarkPodToReady(b *testing.B) { benchPodToReady(b, false) }

// BenchmarkPodToReadyTaken is BenchmarkPodToReady with each pod handed
// over (TakePodBound), as the node agents' bus handler hands the pod it
// decoded.
func BenchmarkPodToReadyTaken(b *testing.B) { benchPodToReady(b, true) }

func benchPodToReady(b *testing.B, take bool) {
	rt, err := sim.New(sim.DefaultConfig("10.0.0.0/8"))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	pub := &readyCounter{}
	pub.cond = sync.NewCond(&pub.mu)
	cfg := nodeagent.DefaultConfig(node, "10.0.0.0/8")
	a, err := nodeagent.New(cfg, rt, nodeagenttest.NewStore(), pub)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Stop()
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	bound := a.HandlePodBound
	if take {
		bound = a.TakePodBound
	}
	for i := range b.N {
		if err := bound(ctx, newPod(fmt.Sprintf("p%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	pub.mu.Lock()
	for pub.ready < b.N {
		pub.cond.Wait()
	}
	envs := pub.all
	pub.mu.Unlock()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pods/s")
	b.ReportMetric(float64(envs)/float64(b.N), "envelopes/pod")
}

// BenchmarkPodMemory: what one agent holds per Running pod with nothing
// happening to it, on the simulated runtime: "bytes/pod" of live heap
// (the worker, its containers, the reported status, the runtime's
// sandbox), "stack-bytes/pod" (goroutine stacks) and "goroutines/pod"
// (0: the pod workers have no goroutine of their own; it was 1). The
// scale goal is at most 10 KB per pod for the whole simulated-node
// process.
func BenchmarkPodMemory(b *testing.B) {
	b.Run("bare", func(b *testing.B) { benchPodMemory(b, nil, func(name string) *corev1.Pod { return newPod(name) }) })
	// token-volume: each pod mounts its ServiceAccount token as the
	// pipeline bench's pods do (a projected volume of a bound token and the
	// kube-root-ca.crt ConfigMap), with a token and a certificate of the
	// api stage's sizes.
	b.Run("token-volume", func(b *testing.B) {
		wrap := func(s *nodeagenttest.Store) nodeagent.NodeStore {
			s.PutConfigMap(&corev1.ConfigMap{
				Metadata: &corev1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: "default", Uid: "root-ca-uid", ResourceVersion: "1"},
				Data:     map[string]string{"ca.crt": strings.Repeat("c", 1100)},
			})
			return &benchTokens{Store: s}
		}
		benchPodMemory(b, wrap, func(name string) *corev1.Pod {
			p := newPod(name)
			p.Metadata.Labels = map[string]string{"app": "bench"} // the pipeline bench's one label
			// Admission names the volume per pod, as Kubernetes'
			// ServiceAccount plugin does (kube-api-access- and a suffix
			// of the pod's), so no two pods' containers are equal.
			vol := "kube-api-access-" + name
			p.Spec.Volumes = []*corev1.Volume{{Name: vol, Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: proto64(3607)}},
				{ConfigMap: &corev1.ConfigMapProjection{Name: "kube-root-ca.crt", Items: []*corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			}}}}
			p.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: vol, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}
			return p
		})
	})
}

// benchTokens answers token requests with a token of a bound token's
// size (~900 bytes), a new string each, as one decoded from the api
// stage's answer is.
type benchTokens struct {
	*nodeagenttest.Store
	n atomic.Int64
}

func (s *benchTokens) RequestServiceAccountToken(context.Context, *corev1.Pod, string, int64) (string, time.Time, error) {
	return fmt.Sprintf("%08d%s", s.n.Add(1), strings.Repeat("t", 900)), time.Now().Add(time.Hour), nil
}

// benchPodMemory runs 2,000 pods to Running on one agent over the
// simulated runtime, with nothing happening to them, and reports the live
// heap, stack and goroutines each holds. wrap, when set, wraps the store.
func benchPodMemory(b *testing.B, wrap func(*nodeagenttest.Store) nodeagent.NodeStore, mkPod func(name string) *corev1.Pod) {
	const pods = 2000
	ctx := context.Background()
	var bytes, stack, goroutines float64
	for b.Loop() {
		rt, err := sim.New(sim.DefaultConfig("10.128.0.0/16"))
		if err != nil {
			b.Fatal(err)
		}
		pub := &readyCounter{}
		pub.cond = sync.NewCond(&pub.mu)
		var st nodeagent.NodeStore = nodeagenttest.NewStore()
		if wrap != nil {
			st = wrap(st.(*nodeagenttest.Store))
		}
		a, err := nodeagent.New(nodeagent.DefaultConfig(node, "10.128.0.0/16"), rt, st, pub)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Start(ctx); err != nil {
			b.Fatal(err)
		}
		heap0, stack0, g0 := liveHeap(), stackInUse(), runtime.NumGoroutine()
		for i := range pods {
			if err := a.HandlePodBound(ctx, mkPod(fmt.Sprintf("p%d", i))); err != nil {
				b.Fatal(err)
			}
		}
		pub.mu.Lock()
		for pub.ready < pods {
			pub.cond.Wait()
		}
		pub.mu.Unlock()
		// The pool's goroutines end once no step is due.
		for range 500 {
			if runtime.NumGoroutine()-g0 < pods/100 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		bytes = float64(liveHeap()-heap0) / pods
		stack = float64(stackInUse()-stack0) / pods
		goroutines = float64(runtime.NumGoroutine()-g0) / pods
		a.Stop()
		rt.Close()
	}
	b.ReportMetric(bytes, "bytes/pod")
	b.ReportMetric(stack, "stack-bytes/pod")
	b.ReportMetric(goroutines, "goroutines/pod")
}

func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func stackInUse() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.StackInuse)
}

// BenchmarkReconcileRunning: what one reconcile costs an agent holding
// 2,000 Running pods that the store lists unchanged but for their
// status and the status stage's record of the report it applied
// (podrules.AnnotationStatusSeq, another at each reconcile), what a
// simulated cluster's reconcile hands every node each ResyncPeriod:
// "bytes/pod" is what it allocates per pod, the steps it causes
// included.
func BenchmarkReconcileRunning(b *testing.B) {
	const pods = 2000
	ctx := context.Background()
	rt, err := sim.New(sim.DefaultConfig("10.128.0.0/16"))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	pub := &readyCounter{}
	pub.cond = sync.NewCond(&pub.mu)
	a, err := nodeagent.New(nodeagent.DefaultConfig(node, "10.128.0.0/16"), rt, nodeagenttest.NewStore(), pub)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Stop()
	if err := a.Start(ctx); err != nil {
		b.Fatal(err)
	}
	listed := make([]*corev1.Pod, pods)
	for i := range pods {
		p := newPod(fmt.Sprintf("p%d", i))
		p.Metadata.Labels = map[string]string{"app": "bench"}
		if err := a.HandlePodBound(ctx, p); err != nil {
			b.Fatal(err)
		}
		listed[i] = p
	}
	pub.mu.Lock()
	for pub.ready < pods {
		pub.cond.Wait()
	}
	pub.mu.Unlock()
	nodeagent.WaitSteps(a)
	// As the store lists them: with their reported status, and the
	// status stage's record of the last report applied, another at each
	// reconcile (as after a pod's first reports).
	lists := [2][]*corev1.Pod{make([]*corev1.Pod, pods), make([]*corev1.Pod, pods)}
	for i, p := range listed {
		st, _ := a.PodStatus(p.GetMetadata().GetUid())
		for j := range lists {
			q := p.CloneVT()
			q.Status = st
			podrules.SetAppliedSeq(q, int64(j+1))
			lists[j][i] = q
		}
	}
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n := 0
	for b.Loop() {
		if err := a.ReconcilePods(ctx, a.ListMark(), lists[n%2]); err != nil {
			b.Fatal(err)
		}
		nodeagent.WaitSteps(a)
		n++
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n*pods), "bytes/pod")
}

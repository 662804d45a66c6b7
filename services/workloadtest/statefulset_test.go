package workloadtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/statefulset"
)

func startStatefulSets(c *cluster, name string) *replica {
	return c.startController(pipeline.StatefulSet, name, func(env stage.Env, cfg controller.Config) (stage.Handler, error) {
		sc := statefulset.DefaultConfig(name)
		sc.Controller = cfg
		return statefulset.New(env, sc, controller.NATSRequester(env.NATS))
	})
}

func newStatefulSet(name string, replicas int32, image string) *apps.StatefulSet {
	labels := map[string]string{"app": name}
	return &apps.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: apps.StatefulSetSpec{
			Replicas:    &replicas,
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

func (c *cluster) getStatefulSet(name string) *apps.StatefulSet {
	c.t.Helper()
	s, ok := get[*apps.StatefulSet](c, objects.StatefulSets, "default", name)
	if !ok {
		c.t.Fatalf("statefulset %s is gone", name)
	}
	return s
}

func (c *cluster) updateStatefulSet(name string, f func(s *apps.StatefulSet)) {
	c.t.Helper()
	c.updateRetry(func() runtime.Object {
		s := c.getStatefulSet(name)
		f(s)
		s.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}
		return s
	})
}

// podStep is one observed change of a pod, in store order.
type podStep struct {
	name     string
	event    string // added, updated, deleted
	ready    bool
	deleting bool
	revision string // controller-revision-hash
}

// podHistory records every change of the pods of namespace default as
// the store orders them (one informer, its handlers called in watch
// order).
type podHistory struct {
	mu    sync.Mutex
	steps []podStep
}

func (c *cluster) watchPods(ctx context.Context) *podHistory {
	h := &podHistory{}
	rec := func(p *corev1.Pod, event string) {
		ready := false
		for _, cond := range p.GetStatus().GetConditions() {
			ready = ready || (cond.GetType() == "Ready" && cond.GetStatus() == "True")
		}
		h.mu.Lock()
		h.steps = append(h.steps, podStep{name: p.GetMetadata().GetName(), event: event, ready: ready,
			deleting: p.GetMetadata().GetDeletionTimestamp() != nil, revision: p.GetMetadata().GetLabels()[apps.ControllerRevisionHashLabelKey]})
		h.mu.Unlock()
	}
	inf, err := informer.New[*corev1.Pod](c.store, "default", informer.Handlers[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) { rec(p, "added") }, OnUpdate: func(_, p *corev1.Pod) { rec(p, "updated") },
		OnDelete: func(p *corev1.Pod) { rec(p, "deleted") },
	})
	if err != nil {
		c.t.Fatal(err)
	}
	go func() { _ = inf.Run(ctx) }()
	if err := inf.WaitForSync(ctx); err != nil {
		c.t.Fatal(err)
	}
	return h
}

func (h *podHistory) snapshot() []podStep {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]podStep(nil), h.steps...)
}

// orderedViolations replays steps and returns each observed state that
// breaks OrderedReady: a pod <set>-<i+1> added while <set>-<i> is not
// Ready (or absent), and a pod <set>-<i> marked terminating while
// <set>-<i+1> still exists.
func orderedViolations(set string, steps []podStep) []string {
	type state struct{ ready, deleting bool }
	pods := map[int]*state{}
	var out []string
	for n, s := range steps {
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(s.name, set+"-"), "%d", &i); err != nil || !strings.HasPrefix(s.name, set+"-") {
			continue
		}
		prev := pods[i]
		switch s.event {
		case "deleted":
			delete(pods, i)
			continue
		case "added":
			for j := 0; j < i; j++ {
				if p := pods[j]; p == nil || !p.ready || p.deleting {
					out = append(out, fmt.Sprintf("step %d: %s created while %s-%d is not Ready (%+v)", n, s.name, set, j, p))
				}
			}
		}
		if s.deleting && (prev == nil || !prev.deleting) {
			if _, ok := pods[i+1]; ok {
				out = append(out, fmt.Sprintf("step %d: %s marked terminating while %s-%d exists", n, s.name, set, i+1))
			}
		}
		pods[i] = &state{ready: s.ready, deleting: s.deleting}
	}
	return out
}

// TestStatefulSetOrderedScaling: a StatefulSet scales 0→3→1 as kube's
// OrderedReady policy says, checked on every pod change the store
// recorded: web-(i+1) is created only once web-i is Ready (web-0 is held
// not ready for a while, so a controller that did not wait would create
// web-1 meanwhile), and the scale down removes web-2 before it starts on
// web-1. The pods carry their identity: hostname, subdomain, the
// pod-name, pod-index and revision labels, the set as controller. The
// status counts them and names the revision, which is a
// ControllerRevision of the set.
func TestStatefulSetOrderedScaling(t *testing.T) {
	c := newCluster(t)
	startStatefulSets(c, "sts-a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hist := c.watchPods(ctx)
	c.kubelet.grace.Store(int64(200 * time.Millisecond))
	c.kubelet.setReady("default", "web-0", false)

	c.apply("create", newStatefulSet("web", 0, "busybox"))
	c.eventually("the empty set observed", 30*time.Second, func() bool {
		s := c.getStatefulSet("web")
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdateRevision != ""
	})
	c.updateStatefulSet("web", func(s *apps.StatefulSet) { s.Spec.Replicas = ptr.To[int32](3) })
	c.eventually("web-0 running, not ready", 30*time.Second, func() bool {
		for _, p := range c.pods("default") {
			if p.GetMetadata().GetName() == "web-0" && p.GetStatus().GetPhase() == "Running" {
				return true
			}
		}
		return false
	})
	time.Sleep(1500 * time.Millisecond) // the controller resyncs meanwhile: it must not go on
	c.kubelet.setReady("default", "web-0", true)
	c.eventually("3 ready replicas", 60*time.Second, func() bool {
		s := c.getStatefulSet("web")
		return s.Status.ReadyReplicas == 3 && s.Status.Replicas == 3 && s.Status.ObservedGeneration == s.Generation
	})

	set := c.getStatefulSet("web")
	if set.Status.CurrentRevision == "" || set.Status.CurrentRevision != set.Status.UpdateRevision || set.Status.CurrentReplicas != 3 ||
		set.Status.UpdatedReplicas != 3 || set.Status.AvailableReplicas != 3 {
		t.Errorf("status %+v", set.Status)
	}
	if _, ok := get[*apps.ControllerRevision](c, objects.ControllerRevisions, "default", set.Status.UpdateRevision); !ok {
		t.Errorf("no ControllerRevision %s", set.Status.UpdateRevision)
	}
	for i, p := range sortedPods(c.pods("default"), "web-") {
		name := fmt.Sprintf("web-%d", i)
		md, spec := p.GetMetadata(), p.GetSpec()
		ref := controller.ControllerOf(md)
		if md.GetName() != name || spec.GetHostname() != name || spec.GetSubdomain() != "web" ||
			md.GetLabels()[apps.StatefulSetPodNameLabel] != name || md.GetLabels()[apps.PodIndexLabel] != fmt.Sprint(i) ||
			md.GetLabels()[apps.ControllerRevisionHashLabelKey] != set.Status.UpdateRevision ||
			ref == nil || ref.GetKind() != "StatefulSet" || ref.GetUid() != string(set.UID) {
			t.Errorf("pod %d: name %s hostname %q subdomain %q labels %v owner %v", i, md.GetName(), spec.GetHostname(), spec.GetSubdomain(), md.GetLabels(), ref)
		}
	}

	c.updateStatefulSet("web", func(s *apps.StatefulSet) { s.Spec.Replicas = ptr.To[int32](1) })
	c.eventually("one pod left", 60*time.Second, func() bool {
		s := c.getStatefulSet("web")
		return len(c.pods("default")) == 1 && s.Status.Replicas == 1 && s.Status.ObservedGeneration == s.Generation
	})
	if ps := c.pods("default"); ps[0].GetMetadata().GetName() != "web-0" {
		t.Errorf("left %s, want web-0", ps[0].GetMetadata().GetName())
	}
	steps := hist.snapshot()
	for _, v := range orderedViolations("web", steps) {
		t.Error(v)
	}
	// The history shows what the check needs: web-0 seen not ready, and
	// the deletions of web-2 then web-1.
	sawHeld, deleted := false, []string{}
	for _, s := range steps {
		sawHeld = sawHeld || (s.name == "web-0" && !s.ready && s.event == "updated")
		if s.event == "deleted" {
			deleted = append(deleted, s.name)
		}
	}
	if !sawHeld || strings.Join(deleted, ",") != "web-2,web-1" {
		t.Errorf("history: web-0 seen held %v, deleted %v", sawHeld, deleted)
	}
}

// TestOrderedViolations: the history check finds each kind of
// violation (it is what TestStatefulSetOrderedScaling relies on).
func TestOrderedViolations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []podStep
		want  int
	}{
		{"in order", []podStep{{name: "w-0", event: "added"}, {name: "w-0", event: "updated", ready: true}, {name: "w-1", event: "added"},
			{name: "w-1", event: "updated", deleting: true}, {name: "w-1", event: "deleted"}, {name: "w-0", event: "updated", deleting: true}}, 0},
		{"created before ready", []podStep{{name: "w-0", event: "added"}, {name: "w-1", event: "added"}}, 1},
		{"lower deleted first", []podStep{{name: "w-0", event: "added", ready: true}, {name: "w-1", event: "added", ready: true},
			{name: "w-0", event: "updated", ready: true, deleting: true}}, 1},
		{"another set's pods", []podStep{{name: "x-1", event: "added"}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := orderedViolations("w", tc.steps); len(got) != tc.want {
				t.Errorf("violations %v, want %d", got, tc.want)
			}
		})
	}
}

// TestStatefulSetRollingUpdatePartition: a template change rolls out from
// the highest ordinal down, each pod replaced only after the one above
// it is back and Ready, and stops at the partition: with partition 1,
// web-0 keeps the old revision (currentReplicas 1, updatedReplicas 2);
// with partition 0 it is replaced too and currentRevision becomes the
// update revision. Old revisions stay as ControllerRevisions.
func TestStatefulSetRollingUpdatePartition(t *testing.T) {
	c := newCluster(t)
	startStatefulSets(c, "sts-a")
	c.kubelet.grace.Store(int64(100 * time.Millisecond))
	c.apply("create", newStatefulSet("web", 3, "busybox"))
	c.eventually("3 ready replicas", 60*time.Second, func() bool {
		s := c.getStatefulSet("web")
		return s.Status.ReadyReplicas == 3 && s.Status.CurrentRevision != ""
	})
	first := c.getStatefulSet("web").Status.CurrentRevision
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hist := c.watchPods(ctx)

	c.updateStatefulSet("web", func(s *apps.StatefulSet) {
		s.Spec.UpdateStrategy = apps.StatefulSetUpdateStrategy{Type: apps.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &apps.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](1)}}
		s.Spec.Template.Spec.Containers[0].Image = "busybox:1.36"
	})
	c.eventually("web-2 and web-1 updated", 60*time.Second, func() bool {
		s := c.getStatefulSet("web")
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == 2 && s.Status.ReadyReplicas == 3
	})
	s := c.getStatefulSet("web")
	if s.Status.CurrentRevision != first || s.Status.UpdateRevision == first || s.Status.CurrentReplicas != 1 {
		t.Errorf("partitioned status %+v (first revision %s)", s.Status, first)
	}
	second := s.Status.UpdateRevision
	time.Sleep(time.Second) // resyncs: the partition holds
	for _, p := range sortedPods(c.pods("default"), "web-") {
		want := second
		if p.GetMetadata().GetName() == "web-0" {
			want = first
		}
		if got := p.GetMetadata().GetLabels()[apps.ControllerRevisionHashLabelKey]; got != want {
			t.Errorf("%s at revision %s, want %s", p.GetMetadata().GetName(), got, want)
		}
	}

	c.updateStatefulSet("web", func(s *apps.StatefulSet) { s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](0) })
	c.eventually("every pod updated", 60*time.Second, func() bool {
		s := c.getStatefulSet("web")
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == 3 && s.Status.ReadyReplicas == 3 &&
			s.Status.CurrentRevision == second
	})
	// Replaced in reverse ordinal order, each after the one above is
	// back at the new revision and Ready.
	var order []string
	ready := map[string]bool{}
	for n, st := range hist.snapshot() {
		if st.deleting && !strings.Contains(strings.Join(order, ","), st.name) {
			order = append(order, st.name)
			var i int
			_, _ = fmt.Sscanf(strings.TrimPrefix(st.name, "web-"), "%d", &i)
			if above := fmt.Sprintf("web-%d", i+1); i < 2 && !ready[above] {
				t.Errorf("step %d: %s replaced before %s was back and Ready at the new revision", n, st.name, above)
			}
		}
		ready[st.name] = st.ready && !st.deleting && st.revision == second
	}
	if strings.Join(order, ",") != "web-2,web-1,web-0" {
		t.Errorf("replaced %v, want web-2,web-1,web-0", order)
	}
	if _, ok := get[*apps.ControllerRevision](c, objects.ControllerRevisions, "default", first); !ok {
		t.Errorf("the first revision %s is gone", first)
	}
}

// sortedPods returns the pods named prefix<i>, by ordinal.
func sortedPods(ps []*corev1.Pod, prefix string) []*corev1.Pod {
	out := make([]*corev1.Pod, len(ps))
	n := 0
	for _, p := range ps {
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(p.GetMetadata().GetName(), prefix), "%d", &i); err == nil && i < len(ps) {
			out[i] = p
			n++
		}
	}
	return out[:n]
}

// TestStatefulSetKilledReplicaConverges: with two replicas of the stage,
// the one owning the set is killed in the middle of an ordered scale up
// (web-2 held not ready stops it half way); the other takes the set over
// once the killed replica's Lease expires and finishes the scale up in
// order, with one revision and no pod beyond the set's ordinals.
func TestStatefulSetKilledReplicaConverges(t *testing.T) {
	c := newCluster(t)
	a := startStatefulSets(c, "sts-a")
	b := startStatefulSets(c, "sts-b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hist := c.watchPods(ctx)
	c.kubelet.setReady("default", "web-2", false)
	c.apply("create", newStatefulSet("web", 5, "busybox"))
	c.eventually("web-2 running, not ready", 30*time.Second, func() bool {
		for _, p := range c.pods("default") {
			if p.GetMetadata().GetName() == "web-2" && p.GetStatus().GetPhase() == "Running" {
				return true
			}
		}
		return false
	})
	victim := a
	if controller.Owner([]string{"sts-a", "sts-b"}, "default/web") == "sts-b" {
		victim = b
	}
	victim.Kill()
	c.kubelet.setReady("default", "web-2", true)
	c.eventually("5 ready replicas", 60*time.Second, func() bool {
		s := c.getStatefulSet("web")
		return s.Status.ReadyReplicas == 5 && s.Status.Replicas == 5 && s.Status.CurrentRevision == s.Status.UpdateRevision
	})
	for _, v := range orderedViolations("web", hist.snapshot()) {
		t.Error(v)
	}
	names := map[string]bool{}
	for _, st := range hist.snapshot() {
		names[st.name] = true
	}
	if len(names) != 5 {
		t.Errorf("pods seen %v, want web-0..web-4", names)
	}
	kvs, _, err := c.store.KV().List(context.Background(), objects.ControllerRevisions.Prefix("default"))
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 1 {
		t.Errorf("%d ControllerRevisions, want 1", len(kvs))
	}
}

// TestStatefulSetHealsPods: the controller keeps each pod's identity and
// replaces what is lost, as kube's does: an identity label removed is
// written back (the pod kept), a deleted pod comes back under its name,
// and a Failed pod (evicted, rejected by its node) is deleted and made
// again.
func TestStatefulSetHealsPods(t *testing.T) {
	c := newCluster(t)
	startStatefulSets(c, "sts-a")
	c.apply("create", newStatefulSet("web", 3, "busybox"))
	c.eventually("3 ready replicas", 60*time.Second, func() bool { return c.getStatefulSet("web").Status.ReadyReplicas == 3 })
	uid := func(name string) string {
		for _, p := range c.pods("default") {
			if p.GetMetadata().GetName() == name {
				return p.GetMetadata().GetUid()
			}
		}
		return ""
	}
	ctx := context.Background()

	before := uid("web-1")
	if _, err := objects.Mutate(ctx, c.store, "default", "web-1", func(p *corev1.Pod) error {
		delete(p.Metadata.Labels, apps.StatefulSetPodNameLabel)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.eventually("web-1's pod-name label back", 30*time.Second, func() bool {
		p, err := objects.Get[*corev1.Pod](ctx, c.store, "default", "web-1")
		return err == nil && p.GetMetadata().GetLabels()[apps.StatefulSetPodNameLabel] == "web-1"
	})
	if uid("web-1") != before {
		t.Error("web-1 was replaced, not relabelled")
	}

	before = uid("web-2")
	if _, err := c.store.Delete(ctx, objects.Pods, "default", "web-2", 0); err != nil {
		t.Fatal(err)
	}
	c.eventually("web-2 back", 30*time.Second, func() bool { u := uid("web-2"); return u != "" && u != before })

	before = uid("web-0")
	if _, err := objects.Mutate(ctx, c.store, "default", "web-0", func(p *corev1.Pod) error {
		p.Status.Phase = "Failed"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.eventually("web-0 made again", 30*time.Second, func() bool { u := uid("web-0"); return u != "" && u != before })
	c.eventually("3 ready replicas again", 30*time.Second, func() bool {
		s := c.getStatefulSet("web")
		return s.Status.ReadyReplicas == 3 && s.Status.Replicas == 3
	})
}

// BenchmarkStatefulSetScaleUp creates a StatefulSet and waits for all
// its pods Ready: OrderedReady makes them one at a time, each after the
// one before is Ready (a pipeline round trip and a stand-in kubelet's
// readying per pod), Parallel all at once.
func BenchmarkStatefulSetScaleUp(b *testing.B) {
	for _, tc := range []struct {
		policy apps.PodManagementPolicyType
		n      int32
	}{{apps.OrderedReadyPodManagement, 20}, {apps.ParallelPodManagement, 100}} {
		b.Run(fmt.Sprintf("%s/replicas=%d", tc.policy, tc.n), func(b *testing.B) {
			c := newCluster(b)
			startStatefulSets(c, "sts-a")
			for i := 0; b.Loop(); i++ {
				name := fmt.Sprintf("web%d", i)
				s := newStatefulSet(name, tc.n, "busybox")
				s.Spec.PodManagementPolicy = tc.policy
				c.apply("create", s)
				c.eventually(name+" ready", 5*time.Minute, func() bool {
					return c.getStatefulSet(name).Status.ReadyReplicas == tc.n
				})
			}
		})
	}
}

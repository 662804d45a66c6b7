package workloadtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/replicaset"
)

func startReplicaSets(c *cluster, name string) *replica {
	return c.startController(pipeline.ReplicaSet, name, func(env stage.Env, cfg controller.Config) (stage.Handler, error) {
		rc := replicaset.DefaultConfig(pipeline.ReplicaSet, name)
		rc.Controller = cfg
		return replicaset.New(env, rc, controller.NATSRequester(env.NATS))
	})
}

func replicaSet(ns, name string, replicas int32, labels map[string]string) *apps.ReplicaSet {
	return &apps.ReplicaSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: apps.ReplicaSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "nginx"}}},
			},
		},
	}
}

// owned returns the live (not terminating) pods of ns whose controller
// has uid.
func (c *cluster) owned(ns, uid string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range c.pods(ns) {
		if ref := controller.ControllerOf(p.GetMetadata()); ref != nil && ref.GetUid() == uid && p.GetMetadata().GetDeletionTimestamp() == nil {
			out = append(out, p)
		}
	}
	return out
}

// TestReplicaSetScale: two controller replicas keep a ReplicaSet at its
// replicas as it is scaled up and down; its pods are named by their slots
// (the same names whichever replica made them), owned by it, and its
// status counts them ready and available.
func TestReplicaSetScale(t *testing.T) {
	c := newCluster(t)
	startReplicaSets(c, "rs-a")
	startReplicaSets(c, "rs-b")
	rs := c.apply("create", replicaSet("default", "web", 3, map[string]string{"app": "web"}))
	uid := rs.GetMetadata().GetUid()
	waitStatus := func(n int32) {
		t.Helper()
		c.eventually("status of 3", 60*time.Second, func() bool {
			got, ok := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", "web")
			return ok && got.Status.Replicas == n && got.Status.ReadyReplicas == n && got.Status.AvailableReplicas == n &&
				got.Status.ObservedGeneration == got.Generation && len(c.owned("default", uid)) == int(n)
		})
	}
	waitStatus(3)
	want := map[string]bool{}
	for _, n := range controller.FreeNames("web-", uid, 3, func(string) bool { return false }) {
		want[n] = true
	}
	for _, p := range c.owned("default", uid) {
		if !want[p.GetMetadata().GetName()] {
			t.Errorf("pod %s is not in one of the first three slots %v", p.GetMetadata().GetName(), want)
		}
		if p.GetMetadata().GetLabels()["app"] != "web" {
			t.Errorf("pod %s has labels %v", p.GetMetadata().GetName(), p.GetMetadata().GetLabels())
		}
	}

	scale := func(n int32) {
		t.Helper()
		cur, _ := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", "web")
		cur.Spec.Replicas = &n
		cur.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"}
		c.apply("update", cur)
	}
	scale(7)
	waitStatus(7)
	scale(2)
	waitStatus(2)
	time.Sleep(time.Second) // no controller overshoots or undershoots afterwards
	if n := len(c.owned("default", uid)); n != 2 {
		t.Errorf("%d pods after scaling to 2", n)
	}
	_ = context.Background()
}

// TestReplicaSetAdoptsAndReleases: a bare pod matching a ReplicaSet's
// selector is adopted (and counted, so the set makes one pod fewer); a
// pod of the set relabelled out of its selector is released (its owner
// reference removed) and replaced.
func TestReplicaSetAdoptsAndReleases(t *testing.T) {
	c := newCluster(t)
	startReplicaSets(c, "rs-a")
	// A bare pod, stored as the api stage stores one.
	orphan := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "orphan", Uid: "orphan-uid",
		CreationTimestamp: timestamppb.Now(), Labels: map[string]string{"app": "web"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "app", Image: "nginx"}}}}
	if _, err := c.store.Create(context.Background(), orphan); err != nil {
		t.Fatal(err)
	}
	c.eventually("the orphan stored", 30*time.Second, func() bool { return len(c.pods("default")) == 1 })

	rs := c.apply("create", replicaSet("default", "web", 2, map[string]string{"app": "web"}))
	uid := rs.GetMetadata().GetUid()
	c.eventually("the orphan adopted and one pod made", 60*time.Second, func() bool {
		got, ok := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", "web")
		return ok && got.Status.Replicas == 2 && len(c.owned("default", uid)) == 2
	})
	adopted := false
	for _, p := range c.owned("default", uid) {
		adopted = adopted || p.GetMetadata().GetName() == "orphan"
	}
	if !adopted {
		t.Fatal("the matching orphan was not adopted")
	}

	// Relabel the adopted pod out of the selector: released, replaced.
	if _, err := objects.Mutate(context.Background(), c.store, "default", "orphan", func(p *corev1.Pod) error {
		p.Metadata.Labels = map[string]string{"app": "other"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the relabelled pod released and replaced", 60*time.Second, func() bool {
		p, err := objects.Get[*corev1.Pod](context.Background(), c.store, "default", "orphan")
		return err == nil && controller.ControllerOf(p.GetMetadata()) == nil && len(c.owned("default", uid)) == 2
	})
}

// TestReplicaSetKilledReplicaNeverOvershoots: while two controller
// replicas scale a ReplicaSet to 60, the one syncing it is killed (no
// Lease release, syncs cut off); the other takes over and the set never
// holds more than 60 pods, and ends with exactly 60.
func TestReplicaSetKilledReplicaNeverOvershoots(t *testing.T) {
	c := newCluster(t)
	a := startReplicaSets(c, "rs-a")
	b := startReplicaSets(c, "rs-b")
	const want = 60
	rs := c.apply("create", replicaSet("default", "web", want, map[string]string{"app": "web"}))
	uid := rs.GetMetadata().GetUid()

	// Watch every pod of the set ever stored at once.
	var mu sync.Mutex
	live, peak := map[string]bool{}, 0
	track := func(p *corev1.Pod, gone bool) {
		if ref := controller.ControllerOf(p.GetMetadata()); ref == nil || ref.GetUid() != uid {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if gone || p.GetMetadata().GetDeletionTimestamp() != nil {
			delete(live, p.GetMetadata().GetName())
		} else {
			live[p.GetMetadata().GetName()] = true
		}
		peak = max(peak, len(live))
	}
	inf, err := informer.New[*corev1.Pod](c.store, "default", informer.Handlers[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) { track(p, false) }, OnUpdate: func(_, p *corev1.Pod) { track(p, false) },
		OnDelete: func(p *corev1.Pod) { track(p, true) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(c.runCtx)
	defer cancel()
	go func() { _ = inf.Run(ctx) }()

	owner := controller.Owner([]string{"rs-a", "rs-b"}, "default/web")
	victim := a
	if owner == "rs-b" {
		victim = b
	}
	c.eventually("the owner to start creating", 30*time.Second, func() bool { return len(c.owned("default", uid)) >= 5 })
	victim.Kill()
	c.eventually("the survivor to finish the scale", 90*time.Second, func() bool {
		got, ok := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", "web")
		return ok && got.Status.Replicas == want && got.Status.ReadyReplicas == want
	})
	time.Sleep(2 * time.Second) // anything the killed replica had in flight lands by now
	if n := len(c.owned("default", uid)); n != want {
		t.Errorf("%d pods after the scale, want %d", n, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if peak > want {
		t.Errorf("the set held %d pods at once, more than its %d replicas", peak, want)
	}
}

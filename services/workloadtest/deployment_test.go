package workloadtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubecontroller "k8s.io/kubernetes/pkg/controller"
	deploymentutil "k8s.io/kubernetes/pkg/controller/deployment/util"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/deployment"
)

func startDeployments(c *cluster, name string) *replica {
	return c.startController(pipeline.Deployment, name, func(env stage.Env, cfg controller.Config) (stage.Handler, error) {
		dc := deployment.DefaultConfig(name)
		dc.Controller = cfg
		return deployment.New(env, dc)
	})
}

func newDeployment(name string, replicas int32, image string, maxSurge, maxUnavailable int) *apps.Deployment {
	labels := map[string]string{"app": name}
	surge, unavailable := intstr.FromInt32(int32(maxSurge)), intstr.FromInt32(int32(maxUnavailable))
	return &apps.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: apps.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: apps.DeploymentStrategy{Type: apps.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &apps.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unavailable}},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

// getDeployment reads Deployment default/name.
func (c *cluster) getDeployment(name string) *apps.Deployment {
	c.t.Helper()
	d, ok := get[*apps.Deployment](c, objects.Deployments, "default", name)
	if !ok {
		c.t.Fatalf("deployment %s is gone", name)
	}
	return d
}

// updateDeployment applies f to Deployment default/name and stores it,
// read again and retried when the controller wrote its status meanwhile
// (409 Conflict), as client-go's RetryOnConflict.
func (c *cluster) updateDeployment(name string, f func(d *apps.Deployment)) {
	c.t.Helper()
	c.updateRetry(func() runtime.Object {
		d := c.getDeployment(name)
		f(d)
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		return d
	})
}

// updateRetry stores the object next returns, calling it again while the
// update is a 409 Conflict.
func (c *cluster) updateRetry(next func() runtime.Object) {
	c.t.Helper()
	for {
		obj := next()
		st, _ := c.object("update", obj)
		switch {
		case st.GetCode() == 409:
			continue
		case st.GetCode() >= 300 || st.GetStatus() == "Failure":
			c.t.Fatalf("update %T: %d %s: %s", obj, st.GetCode(), st.GetReason(), st.GetMessage())
		}
		return
	}
}

// replicaSetsOf lists the ReplicaSets of default whose controller has uid.
func (c *cluster) replicaSetsOf(uid string) []*apps.ReplicaSet {
	c.t.Helper()
	kvs, _, err := c.store.KV().List(context.Background(), objects.ReplicaSets.Prefix("default"))
	if err != nil {
		c.t.Fatal(err)
	}
	var out []*apps.ReplicaSet
	for _, kv := range kvs {
		u := &corev1.Unstructured{}
		if err := objects.Decode(kv, u); err != nil {
			c.t.Fatal(err)
		}
		if ref := controller.ControllerOf(u.GetMetadata()); ref == nil || ref.GetUid() != uid {
			continue
		}
		if rs, ok := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", u.GetMetadata().GetName()); ok {
			out = append(out, rs)
		}
	}
	return out
}

// rolledOut is `kubectl rollout status`'s test of a finished rollout
// (kubectl's DeploymentStatusViewer), and every pod of the new template
// stored.
func rolledOut(d *apps.Deployment) bool {
	if d.Generation > d.Status.ObservedGeneration {
		return false
	}
	if cond := deploymentutil.GetDeploymentCondition(d.Status, apps.DeploymentProgressing); cond != nil && cond.Reason == deploymentutil.TimedOutReason {
		return false
	}
	want := *d.Spec.Replicas
	return d.Status.UpdatedReplicas == want && d.Status.Replicas == want && d.Status.AvailableReplicas == want && d.Status.ReadyReplicas == want
}

// bounds watches a Deployment's ReplicaSets and pods and records every
// observed state breaking a rolling update's bounds: the ReplicaSets'
// replicas summed above replicas+maxSurge, or fewer than
// replicas-maxUnavailable ready pods that are not terminating.
type bounds struct {
	mu         sync.Mutex
	sets       map[string]int32 // name -> spec.replicas
	ready      map[string]bool  // pod name -> ready and not terminating
	violations []string
	maxPods    int32
	minReady   int
	steps      int
	armed      bool // the informers listed what was there at the start
}

func (c *cluster) watchBounds(ctx context.Context, uid string, maxPods int32, minReady int) *bounds {
	b := &bounds{sets: map[string]int32{}, ready: map[string]bool{}, maxPods: maxPods, minReady: minReady}
	setUIDs := map[string]bool{}
	onSet := func(u *corev1.Unstructured, gone bool) {
		ref := controller.ControllerOf(u.GetMetadata())
		if ref == nil || ref.GetUid() != uid {
			return
		}
		// Each ReplicaSet as its event shows it, not as the store holds
		// it now: a read now of this one summed with another's kept from
		// an earlier event mixes two moments. The new set grows only
		// after the old one shrank, so a late new plus an early old adds
		// up to a state that never was (new 4 + old 2 of 4+1).
		ko, err := manifest.ToKube(u)
		if err != nil {
			c.t.Error(err)
			return
		}
		rs := ko.(*apps.ReplicaSet)
		b.mu.Lock()
		defer b.mu.Unlock()
		setUIDs[u.GetMetadata().GetUid()] = true
		if gone {
			delete(b.sets, rs.Name)
		} else {
			b.sets[rs.Name] = *rs.Spec.Replicas
		}
		var sum int32
		for _, n := range b.sets {
			sum += n
		}
		if !b.armed {
			return
		}
		b.steps++
		if sum > b.maxPods {
			b.violations = append(b.violations, fmt.Sprintf("ReplicaSets %v sum to %d > %d", b.sets, sum, b.maxPods))
		}
	}
	onPod := func(p *corev1.Pod, gone bool) {
		ref := controller.ControllerOf(p.GetMetadata())
		b.mu.Lock()
		defer b.mu.Unlock()
		if ref == nil || !setUIDs[ref.GetUid()] {
			return
		}
		ready := false
		for _, cond := range p.GetStatus().GetConditions() {
			ready = ready || (cond.GetType() == "Ready" && cond.GetStatus() == "True")
		}
		name := p.GetMetadata().GetName()
		if gone || !ready || p.GetMetadata().GetDeletionTimestamp() != nil {
			delete(b.ready, name)
		} else {
			b.ready[name] = true
		}
		if !b.armed {
			return
		}
		b.steps++
		if len(b.ready) < b.minReady {
			b.violations = append(b.violations, fmt.Sprintf("%d ready pods < %d", len(b.ready), b.minReady))
		}
	}
	sets, err := informer.NewKind(c.store, objects.ReplicaSets, "default", informer.Handlers[*corev1.Unstructured]{
		OnAdd: func(u *corev1.Unstructured) { onSet(u, false) }, OnUpdate: func(_, u *corev1.Unstructured) { onSet(u, false) },
		OnDelete: func(u *corev1.Unstructured) { onSet(u, true) },
	})
	if err != nil {
		c.t.Fatal(err)
	}
	pods, err := informer.New[*corev1.Pod](c.store, "default", informer.Handlers[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) { onPod(p, false) }, OnUpdate: func(_, p *corev1.Pod) { onPod(p, false) },
		OnDelete: func(p *corev1.Pod) { onPod(p, true) },
	})
	if err != nil {
		c.t.Fatal(err)
	}
	go func() { _ = sets.Run(ctx) }()
	if err := sets.WaitForSync(ctx); err != nil {
		c.t.Fatal(err)
	}
	go func() { _ = pods.Run(ctx) }()
	if err := pods.WaitForSync(ctx); err != nil {
		c.t.Fatal(err)
	}
	b.mu.Lock()
	b.armed = true
	b.mu.Unlock()
	return b
}

func (b *bounds) check(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.steps == 0 {
		t.Fatal("no step of the rollout observed")
	}
	for _, v := range b.violations {
		t.Error(v)
	}
}

// waitRolledOut waits for Deployment name's rollout to finish and returns
// it.
func (c *cluster) waitRolledOut(name string) *apps.Deployment {
	c.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		d := c.getDeployment(name)
		if rolledOut(d) {
			return d
		}
		if time.Now().After(deadline) {
			for _, rs := range c.replicaSetsOf(string(d.UID)) {
				c.t.Logf("ReplicaSet %s: replicas %d, status %+v", rs.Name, *rs.Spec.Replicas, rs.Status)
			}
			// Which layer is behind: a pod the stand-in kubelet never
			// readied, or a status that does not show a ready pod.
			for _, p := range c.pods("default") {
				md := p.GetMetadata()
				c.t.Logf("pod %s: revision %s, controller %s, terminating %t, node %q, phase %q, conditions %v", md.GetName(),
					md.GetResourceVersion(), controller.ControllerOf(md).GetName(), md.GetDeletionTimestamp() != nil,
					p.GetSpec().GetNodeName(), p.GetStatus().GetPhase(), p.GetStatus().GetConditions())
			}
			c.t.Fatalf("deployment %s not rolled out after 90s: generation %d, status %+v", name, d.Generation, d.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicasOf returns the spec.replicas of each ReplicaSet of uid by name.
func (c *cluster) replicasOf(uid string) map[string]int32 {
	out := map[string]int32{}
	for _, rs := range c.replicaSetsOf(uid) {
		out[rs.Name] = *rs.Spec.Replicas
	}
	return out
}

// TestDeploymentRollingUpdate: a Deployment makes its ReplicaSet
// (<name>-<pod-template-hash>, the hash label on its selector and
// template, the Deployment its controller), whose pods become ready; its
// status then says what `kubectl rollout status` waits for, with kube's
// conditions. A new image rolls out through a second ReplicaSet
// (revision 2) without ever exceeding replicas+maxSurge or falling below
// replicas-maxUnavailable ready pods, at any observed step; the old one
// ends at 0 replicas.
func TestDeploymentRollingUpdate(t *testing.T) {
	c := newCluster(t)
	startReplicaSets(c, "rs-a")
	startDeployments(c, "deploy-a")
	startDeployments(c, "deploy-b")
	created := c.apply("create", newDeployment("web", 4, "nginx:1", 1, 1))
	uid := created.GetMetadata().GetUid()
	d := c.waitRolledOut("web")

	sets := c.replicaSetsOf(uid)
	if len(sets) != 1 {
		t.Fatalf("%d ReplicaSets, want 1", len(sets))
	}
	rs := sets[0]
	hash := kubecontroller.ComputeHash(&d.Spec.Template, d.Status.CollisionCount)
	if rs.Name != "web-"+hash || rs.Labels[apps.DefaultDeploymentUniqueLabelKey] != hash ||
		rs.Spec.Selector.MatchLabels[apps.DefaultDeploymentUniqueLabelKey] != hash ||
		rs.Spec.Template.Labels[apps.DefaultDeploymentUniqueLabelKey] != hash {
		t.Errorf("ReplicaSet %s, labels %v, selector %v, template labels %v; want web-%s with the hash label", rs.Name, rs.Labels,
			rs.Spec.Selector.MatchLabels, rs.Spec.Template.Labels, hash)
	}
	ref := metav1.GetControllerOf(rs)
	if ref == nil || ref.UID != d.UID || ref.Kind != "Deployment" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("ReplicaSet's controller reference %+v", ref)
	}
	if rs.Annotations[deploymentutil.RevisionAnnotation] != "1" || rs.Annotations[deploymentutil.DesiredReplicasAnnotation] != "4" ||
		rs.Annotations[deploymentutil.MaxReplicasAnnotation] != "5" {
		t.Errorf("ReplicaSet annotations %v", rs.Annotations)
	}
	if d.Annotations[deploymentutil.RevisionAnnotation] != "1" {
		t.Errorf("Deployment annotations %v", d.Annotations)
	}
	avail := deploymentutil.GetDeploymentCondition(d.Status, apps.DeploymentAvailable)
	prog := deploymentutil.GetDeploymentCondition(d.Status, apps.DeploymentProgressing)
	if avail == nil || avail.Status != v1.ConditionTrue || avail.Reason != deploymentutil.MinimumReplicasAvailable ||
		avail.Message != "Deployment has minimum availability." {
		t.Errorf("Available condition %+v", avail)
	}
	if prog == nil || prog.Status != v1.ConditionTrue || prog.Reason != deploymentutil.NewRSAvailableReason ||
		prog.Message != fmt.Sprintf("ReplicaSet %q has successfully progressed.", rs.Name) {
		t.Errorf("Progressing condition %+v", prog)
	}
	if d.Status.UnavailableReplicas != 0 {
		t.Errorf("unavailableReplicas %d", d.Status.UnavailableReplicas)
	}

	ctx, cancel := context.WithCancel(c.runCtx)
	defer cancel()
	b := c.watchBounds(ctx, uid, 5, 3)
	c.updateDeployment("web", func(d *apps.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:2" })
	d = c.waitRolledOut("web")
	if d.Annotations[deploymentutil.RevisionAnnotation] != "2" {
		t.Errorf("revision %q after the update, want 2", d.Annotations[deploymentutil.RevisionAnnotation])
	}
	c.eventually("the old ReplicaSet at 0", 30*time.Second, func() bool {
		got := c.replicasOf(uid)
		return len(got) == 2 && got[rs.Name] == 0
	})
	b.check(t)
	var pods int
	for _, s := range c.replicaSetsOf(uid) {
		pods += len(c.owned("default", string(s.UID)))
		if s.Name != rs.Name && s.Spec.Template.Spec.Containers[0].Image != "nginx:2" {
			t.Errorf("new ReplicaSet %s runs %s", s.Name, s.Spec.Template.Spec.Containers[0].Image)
		}
	}
	if pods != 4 {
		t.Errorf("%d pods after the rollout, want 4", pods)
	}
}

// TestDeploymentScaleMidRollout: a rollout stuck on pods that never become
// ready (at replicas+maxSurge, with maxUnavailable not ready) is scaled
// from 4 to 8: kube's proportional scaling spreads the 8+maxSurge (25%:
// 10) pods over the old and new ReplicaSets by their sizes (3:2 becomes
// 6:4); a good image then rolls out all 8.
func TestDeploymentScaleMidRollout(t *testing.T) {
	c := newCluster(t)
	startReplicaSets(c, "rs-a")
	startDeployments(c, "deploy-a")
	dep := newDeployment("web", 4, "nginx:1", 0, 0)
	dep.Spec.Strategy.RollingUpdate = nil // kube's defaults, 25% each
	created := c.apply("create", dep)
	uid := created.GetMetadata().GetUid()
	c.waitRolledOut("web")
	old := c.replicaSetsOf(uid)[0].Name

	c.kubelet.holdImage("nginx:broken")
	c.updateDeployment("web", func(d *apps.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:broken" })
	var stuck map[string]int32
	c.eventually("the rollout stuck at 3 old and 2 new", 60*time.Second, func() bool {
		stuck = c.replicasOf(uid)
		return len(stuck) == 2 && stuck[old] == 3
	})
	time.Sleep(time.Second) // nothing moves while the new pods are not ready
	if got := c.replicasOf(uid); len(got) != 2 || got[old] != 3 {
		t.Fatalf("replicas %v, want the old set at 3 and the new at 2", got)
	}
	c.updateDeployment("web", func(d *apps.Deployment) { d.Spec.Replicas = ptr.To(int32(8)) })
	var scaled map[string]int32
	// kube's scale writes the ReplicaSets one after the other: wait for
	// both; a wrong split (not 6 and 4) times out and says what it saw.
	defer func() {
		if t.Failed() {
			t.Logf("ReplicaSets' replicas at the end: %v", scaled)
		}
	}()
	c.eventually("proportional scaling to 6 old and 4 new", 60*time.Second, func() bool {
		scaled = c.replicasOf(uid)
		var sum int32
		for _, n := range scaled {
			sum += n
		}
		return len(scaled) == 2 && scaled[old] == 6 && sum == 10
	})
	c.updateDeployment("web", func(d *apps.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:3" })
	d := c.waitRolledOut("web")
	if d.Status.Replicas != 8 {
		t.Errorf("status replicas %d", d.Status.Replicas)
	}
}

// TestDeploymentKilledReplicaConverges: the Deployment controller replica
// syncing a rollout is killed mid-way (no Lease release); the other takes
// over and finishes it, within the rollout's bounds at every observed
// step, with one ReplicaSet per template.
func TestDeploymentKilledReplicaConverges(t *testing.T) {
	c := newCluster(t)
	startReplicaSets(c, "rs-a")
	a := startDeployments(c, "deploy-a")
	b := startDeployments(c, "deploy-b")
	dep := newDeployment("web", 6, "nginx:1", 2, 1)
	dep.Spec.MinReadySeconds = 1 // a rollout of several seconds
	created := c.apply("create", dep)
	uid := created.GetMetadata().GetUid()
	c.waitRolledOut("web")

	ctx, cancel := context.WithCancel(c.runCtx)
	defer cancel()
	bd := c.watchBounds(ctx, uid, 8, 5)
	c.kubelet.grace.Store(int64(300 * time.Millisecond))
	c.updateDeployment("web", func(d *apps.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:2" })
	c.eventually("the rollout under way", 30*time.Second, func() bool { return len(c.replicaSetsOf(uid)) == 2 })
	victim := a
	if controller.Owner([]string{"deploy-a", "deploy-b"}, "default/web") == "deploy-b" {
		victim = b
	}
	victim.Kill()
	left := false
	for _, rs := range c.replicaSetsOf(uid) {
		left = left || (rs.Annotations[deploymentutil.RevisionAnnotation] == "1" && *rs.Spec.Replicas > 0)
	}
	if !left {
		t.Fatal("the old ReplicaSet was scaled down before the kill: nothing was tested")
	}
	d := c.waitRolledOut("web")
	if d.Annotations[deploymentutil.RevisionAnnotation] != "2" {
		t.Errorf("revision %q", d.Annotations[deploymentutil.RevisionAnnotation])
	}
	if n := len(c.replicaSetsOf(uid)); n != 2 {
		t.Errorf("%d ReplicaSets, want 2", n)
	}
	bd.check(t)
}

// TestDeploymentRecreate: a Recreate Deployment scales its old ReplicaSet
// to 0 and scales the new one up only once every old pod is gone (the
// old pods linger terminating for a while here): a store read made when
// the new ReplicaSet is first seen scaled up finds none of them.
func TestDeploymentRecreate(t *testing.T) {
	c := newCluster(t)
	startReplicaSets(c, "rs-a")
	startDeployments(c, "deploy-a")
	dep := newDeployment("web", 3, "nginx:1", 0, 0)
	dep.Spec.Strategy = apps.DeploymentStrategy{Type: apps.RecreateDeploymentStrategyType}
	created := c.apply("create", dep)
	uid := created.GetMetadata().GetUid()
	c.waitRolledOut("web")
	old := c.replicaSetsOf(uid)[0]
	c.kubelet.grace.Store(int64(time.Second))

	var mu sync.Mutex
	var overlaps []string
	seen := false
	ctx, cancel := context.WithCancel(c.runCtx)
	defer cancel()
	onSet := func(u *corev1.Unstructured) {
		md := u.GetMetadata()
		if ref := controller.ControllerOf(md); ref == nil || ref.GetUid() != uid || md.GetUid() == string(old.UID) {
			return
		}
		rs, ok := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", md.GetName())
		if !ok || *rs.Spec.Replicas == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if seen {
			return
		}
		seen = true
		if n := len(c.owned("default", string(old.UID))); n > 0 {
			overlaps = append(overlaps, fmt.Sprintf("new ReplicaSet %s at %d while %d old pods are live", rs.Name, *rs.Spec.Replicas, n))
		}
		for _, p := range c.pods("default") {
			if ref := controller.ControllerOf(p.GetMetadata()); ref != nil && ref.GetUid() == string(old.UID) {
				overlaps = append(overlaps, fmt.Sprintf("new ReplicaSet %s scaled up while old pod %s exists", rs.Name, p.GetMetadata().GetName()))
			}
		}
	}
	sets, err := informer.NewKind(c.store, objects.ReplicaSets, "default", informer.Handlers[*corev1.Unstructured]{
		OnAdd: onSet, OnUpdate: func(_, u *corev1.Unstructured) { onSet(u) },
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = sets.Run(ctx) }()
	if err := sets.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	c.updateDeployment("web", func(d *apps.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:2" })
	c.waitRolledOut("web")
	mu.Lock()
	defer mu.Unlock()
	if !seen {
		t.Fatal("the new ReplicaSet was never seen scaled up")
	}
	for _, o := range overlaps {
		t.Error(o)
	}
}

// TestDeploymentPausedHistoryDeadline: a paused Deployment's template
// change makes no ReplicaSet until it is resumed; revisionHistoryLimit 1
// keeps one old ReplicaSet; a rollout that makes no progress for
// progressDeadlineSeconds gets Progressing=False ProgressDeadlineExceeded
// with kube's message.
func TestDeploymentPausedHistoryDeadline(t *testing.T) {
	c := newCluster(t)
	startReplicaSets(c, "rs-a")
	startDeployments(c, "deploy-a")
	dep := newDeployment("web", 2, "nginx:1", 1, 0)
	dep.Spec.RevisionHistoryLimit = ptr.To(int32(1))
	dep.Spec.ProgressDeadlineSeconds = ptr.To(int32(2))
	created := c.apply("create", dep)
	uid := created.GetMetadata().GetUid()
	c.waitRolledOut("web")

	c.updateDeployment("web", func(d *apps.Deployment) {
		d.Spec.Paused = true
		d.Spec.Template.Spec.Containers[0].Image = "nginx:2"
	})
	c.eventually("the paused Deployment observed", 30*time.Second, func() bool {
		d := c.getDeployment("web")
		cond := deploymentutil.GetDeploymentCondition(d.Status, apps.DeploymentProgressing)
		return d.Status.ObservedGeneration == d.Generation && cond != nil && cond.Reason == deploymentutil.PausedDeployReason
	})
	time.Sleep(time.Second)
	if n := len(c.replicaSetsOf(uid)); n != 1 {
		t.Fatalf("%d ReplicaSets while paused, want 1", n)
	}
	c.updateDeployment("web", func(d *apps.Deployment) { d.Spec.Paused = false })
	c.waitRolledOut("web")
	for _, image := range []string{"nginx:3", "nginx:4"} {
		c.updateDeployment("web", func(d *apps.Deployment) { d.Spec.Template.Spec.Containers[0].Image = image })
		c.waitRolledOut("web")
	}
	c.eventually("one old ReplicaSet kept", 30*time.Second, func() bool { return len(c.replicaSetsOf(uid)) == 2 })

	c.kubelet.holdImage("nginx:stuck")
	c.updateDeployment("web", func(d *apps.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:stuck" })
	var cond *apps.DeploymentCondition
	c.eventually("ProgressDeadlineExceeded", 60*time.Second, func() bool {
		cond = deploymentutil.GetDeploymentCondition(c.getDeployment("web").Status, apps.DeploymentProgressing)
		return cond != nil && cond.Reason == deploymentutil.TimedOutReason
	})
	var newRS string
	for _, rs := range c.replicaSetsOf(uid) {
		if rs.Spec.Template.Spec.Containers[0].Image == "nginx:stuck" {
			newRS = rs.Name
		}
	}
	if cond.Status != v1.ConditionFalse || cond.Message != fmt.Sprintf("ReplicaSet %q has timed out progressing.", newRS) {
		t.Errorf("Progressing condition %+v", cond)
	}
}

// TestDeploymentAdoptsAndReleasesReplicaSets: an orphan ReplicaSet
// matching a Deployment's selector is adopted (its controller reference
// set, through kube's ReplicaSetControllerRefManager's patch) and, being
// of another template, scaled to 0 as an old revision; relabelled out of
// the selector it is released. The Deployment records kube's
// ScalingReplicaSet Event.
func TestDeploymentAdoptsAndReleasesReplicaSets(t *testing.T) {
	c := newCluster(t)
	startReplicaSets(c, "rs-a")
	startDeployments(c, "deploy-a")
	orphan := replicaSet("default", "web-orphan", 1, map[string]string{"app": "web"})
	orphan.Spec.Template.Spec.Containers[0].Image = "nginx:0"
	orphan.Labels = map[string]string{"app": "web"}
	orphanUID := c.apply("create", orphan).GetMetadata().GetUid()
	created := c.apply("create", newDeployment("web", 2, "nginx:1", 1, 0))
	uid := created.GetMetadata().GetUid()
	d := c.waitRolledOut("web")

	c.eventually("the orphan adopted and scaled to 0", 30*time.Second, func() bool {
		rs, ok := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", "web-orphan")
		ref := metav1.GetControllerOf(rs)
		return ok && ref != nil && string(ref.UID) == uid && *rs.Spec.Replicas == 0
	})
	if n := len(c.replicaSetsOf(uid)); n != 2 {
		t.Errorf("%d ReplicaSets of the Deployment, want the adopted one and its own", n)
	}
	rs, _ := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", "web-orphan")
	if string(rs.UID) != orphanUID {
		t.Fatalf("the orphan was replaced (uid %s, was %s)", rs.UID, orphanUID)
	}

	c.updateRetry(func() runtime.Object {
		rs, _ := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", "web-orphan")
		rs.Labels = map[string]string{"app": "other"}
		rs.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"}
		return rs
	})
	c.eventually("the relabelled ReplicaSet released", 30*time.Second, func() bool {
		rs, ok := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", "web-orphan")
		return ok && metav1.GetControllerOf(rs) == nil
	})

	newRS := "web-" + kubecontroller.ComputeHash(&d.Spec.Template, d.Status.CollisionCount)
	want := fmt.Sprintf("Scaled up replica set %s from 0 to 2", newRS)
	c.eventually("the ScalingReplicaSet Event", 30*time.Second, func() bool {
		evs, _, err := objects.List[*corev1.Event](context.Background(), c.store, "default")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.GetReason() == "ScalingReplicaSet" && e.GetMessage() == want && e.GetInvolvedObject().GetName() == "web" &&
				e.GetInvolvedObject().GetKind() == "Deployment" {
				return true
			}
		}
		return false
	})
}

// BenchmarkDeploymentRollout: one operation is a Deployment of N
// replicas created and rolled out, then rolled out again with a new
// image (25% surge and unavailability), with one replica of each
// controller and the test kubelet readying pods at once.
func BenchmarkDeploymentRollout(b *testing.B) {
	for _, n := range []int32{100, 1000} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			c := newCluster(b)
			startReplicaSets(c, "rs-a")
			startDeployments(c, "deploy-a")
			for i := 0; b.Loop(); i++ {
				name := fmt.Sprintf("web-%d", i)
				dep := newDeployment(name, n, "nginx:1", 0, 0)
				dep.Spec.Strategy.RollingUpdate = nil
				c.apply("create", dep)
				c.waitRolledOut(name)
				c.updateDeployment(name, func(d *apps.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:2" })
				c.waitRolledOut(name)
			}
		})
	}
}

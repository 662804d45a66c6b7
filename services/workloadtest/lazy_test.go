package workloadtest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	apps "k8s.io/api/apps/v1"
	batch "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/deployment"
	"github.com/podflow/podflow/services/stages/job"
	"github.com/podflow/podflow/services/stages/replicaset"
)

// lazyIdle is the tests' Config.PodsIdle: a pod informer not wanted is
// stopped soon.
const lazyIdle = 300 * time.Millisecond

// startLazyReplicaSets starts a ReplicaSet controller replica whose pod
// informer stops lazyIdle after its last set went, and returns it.
func startLazyReplicaSets(c *cluster, name string) *replicaset.Controller {
	var rc *replicaset.Controller
	c.startController(pipeline.ReplicaSet, name, func(env stage.Env, cfg controller.Config) (stage.Handler, error) {
		cfg.PodsIdle = lazyIdle
		conf := replicaset.DefaultConfig(pipeline.ReplicaSet, name)
		conf.Controller = cfg
		var err error
		rc, err = replicaset.New(env, conf, controller.NATSRequester(env.NATS))
		return rc, err
	})
	return rc
}

// started waits until the replica's Runner started: its informers synced
// (the Lazy's first decision made) and its Lease is renewed.
func (c *cluster) started(r *controller.Runner, name string) {
	c.t.Helper()
	c.eventually(name+" started", 60*time.Second, func() bool { return slices.Contains(r.Members().Live(), name) })
}

// podCreations counts the pods ever added to namespace ns.
type podCreations struct {
	mu    sync.Mutex
	names map[string]bool
}

func (c *cluster) countPods(ns string) *podCreations {
	pc := &podCreations{names: map[string]bool{}}
	inf, err := informer.New[*corev1.Pod](c.store, ns, informer.Handlers[*corev1.Pod]{OnAdd: func(p *corev1.Pod) {
		pc.mu.Lock()
		pc.names[p.GetMetadata().GetName()] = true
		pc.mu.Unlock()
	}})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(c.runCtx)
	c.t.Cleanup(cancel)
	go func() { _ = inf.Run(ctx) }()
	if err := inf.WaitForSync(ctx); err != nil {
		c.t.Fatal(err)
	}
	return pc
}

func (pc *podCreations) count() int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return len(pc.names)
}

// TestReplicaSetControllerWatchesPodsOnlyWithSets: a ReplicaSet
// controller started with no ReplicaSet holds no pod watch, though pods
// exist. A ReplicaSet created over two matching bare pods is synced from
// the full pod list — it adopts both and creates one pod, never the three
// a sync before the pods' list would — and once the last set is deleted
// the watch is stopped; the next set starts it again and is synced.
func TestReplicaSetControllerWatchesPodsOnlyWithSets(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	for _, name := range []string{"bare-1", "bare-2"} {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: name + "-uid",
			CreationTimestamp: timestamppb.Now(), Labels: map[string]string{"app": "web"}},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "app", Image: "nginx"}}}}
		if _, err := c.store.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	created := c.countPods("default")
	rc := startLazyReplicaSets(c, "rs-a")
	c.started(rc.Runner(), "rs-a")
	lazy := rc.Runner().Lazy()
	if lazy.Running() || lazy.Starts() != 0 {
		t.Fatalf("with no ReplicaSet: pod informer running %v, started %d times", lazy.Running(), lazy.Starts())
	}

	rs := c.apply("create", replicaSet("default", "web", 3, map[string]string{"app": "web"}))
	uid := rs.GetMetadata().GetUid()
	c.eventually("the bare pods adopted and one pod made", 60*time.Second, func() bool {
		got, ok := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", "web")
		return ok && got.Status.Replicas == 3 && got.Status.ObservedGeneration == got.Generation && len(c.owned("default", uid)) == 3
	})
	var owned []string
	for _, p := range c.owned("default", uid) {
		owned = append(owned, p.GetMetadata().GetName())
	}
	if !slices.Contains(owned, "bare-1") || !slices.Contains(owned, "bare-2") {
		t.Errorf("the set owns %v, not both bare pods", owned)
	}
	if n := created.count(); n != 3 {
		t.Errorf("%d pods were ever in the namespace, want 3 (two bare, one made)", n)
	}

	st, _ := c.request(&apiv1.ObjectRequest{Token: adminToken, Verb: "delete", Kind: objects.ReplicaSets.Qualified(), Namespace: "default", Name: "web"})
	if st.GetCode() >= 300 {
		t.Fatalf("delete the set: %d %s", st.GetCode(), st.GetMessage())
	}
	c.eventually("the pod informer stopped", 60*time.Second, func() bool { return !lazy.Running() })

	rs = c.apply("create", replicaSet("default", "api", 2, map[string]string{"app": "api"}))
	uid = rs.GetMetadata().GetUid()
	c.eventually("the second set's pods made", 60*time.Second, func() bool {
		got, ok := get[*apps.ReplicaSet](c, objects.ReplicaSets, "default", "api")
		return ok && got.Status.Replicas == 2 && len(c.owned("default", uid)) == 2
	})
	if n := lazy.Starts(); n != 2 {
		t.Errorf("pod informer started %d times, want 2", n)
	}
}

// TestJobControllerWithNoJobRemovesFinalizers: a Job deleted while no Job
// controller ran leaves pods with the tracking finalizer; a replica
// started then, with no Job at all, still removes it (its pod informer
// runs until its first list was looked at, and while a Job's pod keeps
// the finalizer), then stops watching pods.
func TestJobControllerWithNoJobRemovesFinalizers(t *testing.T) {
	c := newCluster(t)
	c.kubelet.holdImage("busybox") // the pods keep running
	first := startJobs(c, "job-a")
	u := c.apply("create", newJob("default", "work", batch.JobSpec{Completions: ptr.To[int32](3), Parallelism: ptr.To[int32](3)}))
	uid := u.GetMetadata().GetUid()
	withFinalizer := func() int {
		n := 0
		for _, p := range c.pods("default") {
			md := p.GetMetadata()
			if ref := controller.ControllerOf(md); ref != nil && ref.GetUid() == uid && slices.Contains(md.GetFinalizers(), job.TrackingFinalizer) {
				n++
			}
		}
		return n
	}
	c.eventually("the Job's three pods", 60*time.Second, func() bool { return withFinalizer() == 3 })
	first.Stop()
	// Background: the Job goes at once (no garbage collector runs here to
	// orphan its pods, the default for a Job).
	st, _ := c.request(&apiv1.ObjectRequest{Token: adminToken, Verb: "delete", Kind: objects.Jobs.Qualified(), Namespace: "default", Name: "work",
		PropagationPolicy: ptr.To("Background")})
	if st.GetCode() >= 300 {
		t.Fatalf("delete the Job: %d %s", st.GetCode(), st.GetMessage())
	}
	c.eventually("the Job gone", 30*time.Second, func() bool {
		_, ok := get[*batch.Job](c, objects.Jobs, "default", "work")
		return !ok
	})
	if n := withFinalizer(); n != 3 {
		t.Fatalf("%d pods keep the finalizer with no controller running, want 3", n)
	}

	second := startLazyJobs(c, "job-b")
	c.eventually("the finalizers removed with no Job", 60*time.Second, func() bool { return withFinalizer() == 0 })
	lazy := second.Runner().Lazy()
	c.eventually("the pod informer stopped", 60*time.Second, func() bool { return !lazy.Running() })
	if n := lazy.Starts(); n != 1 {
		t.Errorf("pod informer started %d times, want 1", n)
	}

	// With no Job and no pod keeping the finalizer, a replica holds no
	// pod watch from its start.
	third := startLazyJobs(c, "job-c")
	c.started(third.Runner(), "job-c")
	if l := third.Runner().Lazy(); l.Running() || l.Starts() != 0 {
		t.Errorf("with no Job: pod informer running %v, started %d times", l.Running(), l.Starts())
	}
}

// startLazyJobs starts a Job controller replica whose pod informer
// stops lazyIdle after it was last wanted, and returns it.
func startLazyJobs(c *cluster, name string) *job.Controller {
	var jc *job.Controller
	c.startController(pipeline.Job, name, func(env stage.Env, cfg controller.Config) (stage.Handler, error) {
		cfg.PodsIdle = lazyIdle
		conf := job.DefaultConfig(name)
		conf.Controller = cfg
		var err error
		jc, err = job.New(env, conf, controller.NATSRequester(env.NATS))
		return jc, err
	})
	return jc
}

// TestDeploymentControllerWatchesPodsOnlyForRecreate: the Deployment
// controller reads pods only in a Recreate rollout (kube's
// getPodMapForDeployment, and deletePod queues only a Recreate
// Deployment), so a RollingUpdate Deployment's scale-up starts no pod
// watch; a Deployment turned to Recreate starts it, and its rollout
// still stops every old pod before the new ReplicaSet scales up.
func TestDeploymentControllerWatchesPodsOnlyForRecreate(t *testing.T) {
	c := newCluster(t)
	startReplicaSets(c, "rs-a")
	var dc *deployment.Controller
	c.startController(pipeline.Deployment, "deploy-a", func(env stage.Env, cfg controller.Config) (stage.Handler, error) {
		cfg.PodsIdle = lazyIdle
		conf := deployment.DefaultConfig("deploy-a")
		conf.Controller = cfg
		var err error
		dc, err = deployment.New(env, conf)
		return dc, err
	})
	c.started(dc.Runner(), "deploy-a")
	lazy := dc.Runner().Lazy()

	created := c.apply("create", newDeployment("web", 3, "nginx:1", 1, 0))
	uid := created.GetMetadata().GetUid()
	c.waitRolledOut("web")
	if lazy.Running() || lazy.Starts() != 0 {
		t.Fatalf("a RollingUpdate Deployment rolled out: pod informer running %v, started %d times; want never started", lazy.Running(), lazy.Starts())
	}

	old := c.replicaSetsOf(uid)[0]
	c.updateDeployment("web", func(d *apps.Deployment) {
		d.Spec.Strategy = apps.DeploymentStrategy{Type: apps.RecreateDeploymentStrategyType}
		d.Spec.Template.Spec.Containers[0].Image = "nginx:2"
	})
	d := c.waitRolledOut("web")
	if lazy.Starts() != 1 {
		t.Errorf("after a Recreate rollout the pod informer started %d times, want 1", lazy.Starts())
	}
	if d.Status.UpdatedReplicas != 3 {
		t.Errorf("updatedReplicas %d, want 3", d.Status.UpdatedReplicas)
	}
	if n := len(c.owned("default", string(old.UID))); n != 0 {
		t.Errorf("%d pods of the old ReplicaSet are left", n)
	}

	c.updateDeployment("web", func(d *apps.Deployment) {
		surge, unavailable := intstr.FromInt32(1), intstr.FromInt32(0)
		d.Spec.Strategy = apps.DeploymentStrategy{Type: apps.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &apps.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unavailable}}
	})
	c.eventually("the pod informer stopped with no Recreate Deployment left", 60*time.Second, func() bool { return !lazy.Running() })
}

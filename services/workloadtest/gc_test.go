package workloadtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/garbagecollector"
)

func startGC(c *cluster, name string) *replica {
	return c.startController(pipeline.GarbageCollector, name, func(env stage.Env, _ controller.Config) (stage.Handler, error) {
		return garbagecollector.New(env, garbagecollector.DefaultConfig())
	})
}

// TestGarbageCollectorDeletesDependents: `kubectl delete deployment`
// through the api stage; the garbage collector (two replicas, one killed
// on the way) deletes its ReplicaSet and then, the ReplicaSet gone, its
// pods (gracefully: marked, then finished by the kubelet). A pod with two
// owners loses only the reference to the one deleted and lives on; it is
// deleted once its last owner is. A pod whose owner has the same name but
// another uid is deleted; one owned by an unknown kind is kept.
func TestGarbageCollectorDeletesDependents(t *testing.T) {
	c := newCluster(t)
	startDeployments(c, "deploy-a")
	startReplicaSets(c, "rs-a")
	gcA := startGC(c, "gc-a")
	startGC(c, "gc-b")
	ctx := context.Background()

	d := c.apply("create", newDeployment("web", 3, "nginx", 1, 0))
	c.waitRolledOut("web")
	rss := c.replicaSetsOf(d.GetMetadata().GetUid())
	if len(rss) != 1 {
		t.Fatalf("%d ReplicaSets, want 1", len(rss))
	}
	rsUID := string(rss[0].UID)
	if n := len(c.owned("default", rsUID)); n != 3 {
		t.Fatalf("%d pods, want 3", n)
	}

	// Owners of a pod the test makes: two ConfigMaps.
	owner := func(name string) *corev1.OwnerReference {
		cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: name + "-uid"}}
		if _, err := c.store.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return &corev1.OwnerReference{ApiVersion: "v1", Kind: "ConfigMap", Name: name, Uid: name + "-uid"}
	}
	a, b := owner("owner-a"), owner("owner-b")
	stale := &corev1.OwnerReference{ApiVersion: "v1", Kind: "ConfigMap", Name: "owner-a", Uid: "an-older-uid"}
	unknown := &corev1.OwnerReference{ApiVersion: "example.com/v1", Kind: "Widget", Name: "w", Uid: "w-uid"}
	pod := func(name string, refs ...*corev1.OwnerReference) {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: name + "-uid", OwnerReferences: refs},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "app", Image: "nginx"}}}}
		if _, err := c.store.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	pod("shared", a, b)
	pod("unknown-owner", unknown)

	st, _ := c.request(&apiv1.ObjectRequest{Token: adminToken, Verb: "delete", Kind: objects.Deployments.Qualified(), Namespace: "default", Name: "web"})
	if st.GetCode() >= 300 {
		t.Fatalf("delete deployment: %d %s", st.GetCode(), st.GetMessage())
	}
	c.eventually("the ReplicaSet deleted", 60*time.Second, func() bool {
		_, err := c.store.GetKind(ctx, objects.ReplicaSets, "default", rss[0].Name)
		return errors.Is(err, raftstore.ErrNotFound)
	})
	gcA.Kill()
	c.eventually("the pods deleted", 60*time.Second, func() bool {
		for _, p := range c.pods("default") {
			if ref := controller.ControllerOf(p.GetMetadata()); ref != nil && ref.GetUid() == rsUID {
				return false
			}
		}
		return true
	})

	// A pod with one of two owners gone keeps the other.
	if _, err := c.store.Delete(ctx, objects.ConfigMaps, "default", "owner-a", 0); err != nil {
		t.Fatal(err)
	}
	c.eventually("the reference to owner-a dropped", 60*time.Second, func() bool {
		p, err := objects.Get[*corev1.Pod](ctx, c.store, "default", "shared")
		if err != nil {
			t.Fatal(err)
		}
		refs := p.GetMetadata().GetOwnerReferences()
		return len(refs) == 1 && refs[0].GetUid() == b.GetUid()
	})
	if p, _ := objects.Get[*corev1.Pod](ctx, c.store, "default", "shared"); p.GetMetadata().GetDeletionTimestamp() != nil {
		t.Fatal("a pod with an owner left is being deleted")
	}

	// An owner of the same name but another uid is not the owner.
	if _, err := c.store.Create(ctx, &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "owner-a", Uid: "owner-a-new-uid"}}); err != nil {
		t.Fatal(err)
	}
	pod("stale-owner", stale)
	if _, err := c.store.Delete(ctx, objects.ConfigMaps, "default", "owner-b", 0); err != nil {
		t.Fatal(err)
	}
	gone := func(name string) func() bool {
		return func() bool {
			_, err := objects.Get[*corev1.Pod](ctx, c.store, "default", name)
			return errors.Is(err, raftstore.ErrNotFound)
		}
	}
	c.eventually("the pod with its last owner gone deleted", 60*time.Second, gone("shared"))
	c.eventually("the pod of a recreated owner deleted", 60*time.Second, gone("stale-owner"))
	if gone("unknown-owner")() {
		t.Fatal("a pod owned by a kind the store does not know was deleted")
	}
}

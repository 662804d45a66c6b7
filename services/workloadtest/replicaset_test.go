package workloadtest

import (
	"context"
	"testing"
	"time"

	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
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

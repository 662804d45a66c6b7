package replicaset

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/podflow/podflow/proto/corev1"
)

// TestKubePodCache: a pod the informer holds is converted once; an update
// (a new object) is converted again, and a deletion forgets it, but not
// the conversion of a newer pod of the same name.
func TestKubePodCache(t *testing.T) {
	c := &Controller{kubePods: map[string]kubePod{}}
	pod := func(uid, rv, phase string) *corev1.Pod {
		return &corev1.Pod{
			Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web-1", Uid: uid, ResourceVersion: rv},
			Status:   &corev1.PodStatus{Phase: phase},
		}
	}
	p1 := pod("u1", "5", "Pending")
	k1 := c.kubePod(p1)
	if k1.Status.Phase != v1.PodPending || k1.ResourceVersion != "5" || k1.UID != "u1" {
		t.Fatalf("conversion: %+v", k1)
	}
	if again := c.kubePod(p1); again != k1 {
		t.Error("the same informer object was converted twice")
	}
	p2 := pod("u1", "6", "Running")
	k2 := c.kubePod(p2)
	if k2 == k1 || k2.Status.Phase != v1.PodRunning || k2.ResourceVersion != "6" {
		t.Fatalf("an updated pod: %+v, want its new status", k2)
	}
	c.forgetKubePod(pod("u0", "4", "")) // an older pod of that name
	if len(c.kubePods) != 1 {
		t.Fatal("the deletion of an older pod of the name dropped the newer one's conversion")
	}
	c.forgetKubePod(p2)
	if len(c.kubePods) != 0 {
		t.Errorf("a deleted pod's conversion is kept: %v", c.kubePods)
	}
}

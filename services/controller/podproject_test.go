package controller_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

// TestNewPodSpecInformer: a pod informer built with NewPodSpecInformer
// holds each pod's metadata and status as stored and, of its spec, only
// the fields named, through the list and the watch; KubePod of its pods
// is KubePod of the stored pods; an unknown field name is an error.
func TestNewPodSpecInformer(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			Metadata: &corev1.ObjectMeta{Namespace: "a", Name: name, Uid: "u-" + name, Labels: map[string]string{"app": "web"},
				OwnerReferences: []*corev1.OwnerReference{{Kind: "ReplicaSet", Name: "web", Uid: "rs", Controller: true}}},
			Spec: &corev1.PodSpec{NodeName: "n1", Containers: []*corev1.Container{{Name: "app", Image: "nginx"}},
				Tolerations: []*corev1.Toleration{{Key: "k", Operator: "Exists"}}, ServiceAccountName: "default"},
			Status: &corev1.PodStatus{Phase: "Running", Conditions: []*corev1.PodCondition{{Type: "Ready", Status: "True"}}},
		}
	}
	if _, err := st.Create(ctx, pod("listed")); err != nil {
		t.Fatal(err)
	}
	if _, err := controller.NewPodSpecInformer(st, informer.Handlers[*corev1.Pod]{}, "node_name", "no_such_field"); err == nil {
		t.Fatal("an unknown spec field: no error")
	}
	added := make(chan *corev1.Pod, 4)
	inf, err := controller.NewPodSpecInformer(st, informer.Handlers[*corev1.Pod]{OnAdd: func(p *corev1.Pod) { added <- p }}, "node_name", "tolerations")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if _, err := st.Create(ctx, pod("watched")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got := <-added
		stored, err := objects.Get[*corev1.Pod](ctx, st, "a", got.GetMetadata().GetName())
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got.GetMetadata(), stored.GetMetadata()) || !proto.Equal(got.GetStatus(), stored.GetStatus()) {
			t.Errorf("%s: metadata and status %v, stored %v", got.GetMetadata().GetName(), got, stored)
		}
		want := &corev1.PodSpec{NodeName: "n1", Tolerations: stored.GetSpec().GetTolerations()}
		if !proto.Equal(got.GetSpec(), want) {
			t.Errorf("%s: spec %v, want %v", got.GetMetadata().GetName(), got.GetSpec(), want)
		}
		if k, ks := controller.KubePod(got), controller.KubePod(stored); !apiequality.Semantic.DeepEqual(k, ks) {
			t.Errorf("%s: KubePod %v, of the stored pod %v", got.GetMetadata().GetName(), k, ks)
		}
	}
}

package apiserver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// TestClientGo uses client-go as a controller would — a typed clientset
// (JSON and protobuf) and a shared pod informer — against the real api
// stage's HTTPS front door.
func TestClientGo(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	cfg := &rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcs, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	added, updated, deleted := map[string]int{}, map[string]map[string]string{}, map[string]bool{}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			mu.Lock()
			added[o.(*k8scorev1.Pod).Name]++
			mu.Unlock()
		},
		UpdateFunc: func(_, o any) {
			mu.Lock()
			updated[o.(*k8scorev1.Pod).Name] = o.(*k8scorev1.Pod).Labels
			mu.Unlock()
		},
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			mu.Lock()
			deleted[o.(*k8scorev1.Pod).Name] = true
			mu.Unlock()
		},
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	defer func() { close(stop); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}

	pod := &k8scorev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cg", Labels: map[string]string{"app": "cg"}},
		Spec:       k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "c", Image: "nginx"}}},
	}
	created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if created.UID == "" || created.ResourceVersion == "" || created.Namespace != "default" || created.Spec.Containers[0].Image != "nginx" {
		t.Fatalf("created pod: %+v", created)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: %v, want AlreadyExists", err)
	}
	pb := pod.DeepCopy()
	pb.Name = "cg-protobuf"
	if _, err := pcs.CoreV1().Pods("default").Create(ctx, pb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("protobuf create: %v", err)
	}
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, "cg", types.StrategicMergePatchType,
		[]byte(`{"metadata":{"labels":{"tier":"front"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch: %v", err)
	}
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "tier=front"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "cg" {
		t.Fatalf("list by label: %v %v", list, err)
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get missing: %v, want NotFound", err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, &k8scorev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad"}}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("create without containers: %v, want Invalid", err)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "cg", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		ok := added["cg"] == 1 && added["cg-protobuf"] == 1 && updated["cg"]["tier"] == "front" && deleted["cg"]
		state := []any{added, updated, deleted}
		mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("informer saw %v", state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

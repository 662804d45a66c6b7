package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// TestListsLargerThanABusMessage: a namespace holding more than the bus's
// largest message (set to 1 MiB here; 8 MiB by default) in ConfigMaps is
// listed whole over HTTPS, protobuf and JSON, an informer syncs every
// object from its relist, and a collection DELETE removes them all: the
// store streams lists in chunks, so no object count or size breaks a list,
// an informer's start or a delete of a collection (a single reply past the
// bus's largest message used to be dropped, and every such list waited
// 60 s for nothing).
func TestListsLargerThanABusMessage(t *testing.T) {
	const maxPayload = 1 << 20
	s := startSystem(t, options{maxPayload: maxPayload})
	cfg := &rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}, Timeout: time.Minute}
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "big"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const n, size = 12, 100 << 10 // 12 × 100 KiB: 1.2 MiB
	if n*size <= maxPayload {
		t.Fatalf("%d bytes fit in one bus message", n*size)
	}
	value := func(i int) string { return string(bytes.Repeat([]byte{'a' + byte(i%26)}, size)) }
	for i := range n {
		cm := &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}, Data: map[string]string{"v": value(i)}}
		if _, err := cs.CoreV1().ConfigMaps("big").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", cm.Name, err)
		}
	}
	check := func(how string, items []k8scorev1.ConfigMap) {
		t.Helper()
		if len(items) != n {
			t.Fatalf("%s: %d ConfigMaps, want %d", how, len(items), n)
		}
		for _, cm := range items {
			var i int
			if _, err := fmt.Sscanf(cm.Name, "cm-%02d", &i); err != nil || cm.Data["v"] != value(i) {
				t.Fatalf("%s: %s came back altered (%d bytes)", how, cm.Name, len(cm.Data["v"]))
			}
		}
	}
	for how, c := range map[string]*kubernetes.Clientset{"JSON": cs, "protobuf": pcs} {
		l, err := c.CoreV1().ConfigMaps("big").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("%s list: %v", how, err)
		}
		check(how+" list", l.Items)
	}

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("big"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	stop := make(chan struct{})
	factory.Start(stop)
	defer func() { close(stop); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	var cached []k8scorev1.ConfigMap
	for _, o := range inf.GetStore().List() {
		cached = append(cached, *o.(*k8scorev1.ConfigMap))
	}
	check("informer", cached)

	if err := cs.CoreV1().ConfigMaps("big").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete collection: %v", err)
	}
	l, err := cs.CoreV1().ConfigMaps("big").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 0 {
		t.Fatalf("after the collection delete: %v, %d left", err, len(l.Items))
	}
}

package nodewire_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/ops/processes/nodewire"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
)

// countingKV counts a real store's gets and watches.
type countingKV struct {
	objects.KV
	mu            sync.Mutex
	gets, watches int
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...raftstore.ReadOption) (*raftstore.KV, error) {
	c.mu.Lock()
	c.gets++
	c.mu.Unlock()
	return c.KV.Get(ctx, key, opts...)
}

func (c *countingKV) Watch(ctx context.Context, prefix string, fromRev int64, opts ...raftstore.WatchOption) (objects.Watch, error) {
	c.mu.Lock()
	c.watches++
	c.mu.Unlock()
	return c.KV.Watch(ctx, prefix, fromRev, opts...)
}

func (c *countingKV) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets, c.watches
}

// TestObjectCacheWatchesReferencedObjects: with the object cache, the
// ConfigMaps and Secrets registered pods reference are read from one
// watch per object shared by the pods (no store read per pod), follow
// the store's updates, creations and deletions, and are read from the
// store again once the last pod referencing them is gone. A ConfigMap no
// pod references is read from the store.
func TestObjectCacheWatchesReferencedObjects(t *testing.T) {
	cluster := raftstoretest.MakeCluster(t, 1)
	kv := &countingKV{KV: objects.New(cluster.Client(t)).KV()}
	real := objects.FromKV(kv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := nodewire.NewStore(real).WithObjectCache(ctx)

	cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "one"}}
	if _, err := real.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	pod := func(uid string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "p-" + uid, Uid: uid},
			Spec: &corev1.PodSpec{Volumes: []*corev1.Volume{{Name: "v", Projected: &corev1.ProjectedVolumeSource{
				Sources: []*corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{Name: "kube-root-ca.crt"}},
					{Secret: &corev1.SecretProjection{Name: "later"}},
				}}}}}}
	}
	data := func(want string) func() bool {
		return func() bool {
			got, err := store.GetConfigMap(ctx, "default", "kube-root-ca.crt")
			return err == nil && got.GetData()["ca.crt"] == want
		}
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
		}
	}

	for i := range 50 {
		store.RegisterPod(pod(string(rune('a'+i%26)) + string(rune('a'+i/26))))
	}
	gets0, _ := kv.counts()
	for range 50 {
		if !data("one")() {
			t.Fatal("the registered pods' ConfigMap is not read from the cache")
		}
	}
	if _, err := store.GetSecret(ctx, "default", "later"); !errors.Is(err, nodeagent.ErrNotFound) {
		t.Fatalf("a referenced Secret that does not exist: %v, want not found", err)
	}
	if gets, watches := kv.counts(); gets != gets0 || watches != 2 {
		t.Errorf("50 pods' reads: %d store gets and %d watches, want none and 2 (one per object)", gets-gets0, watches)
	}
	// The cache decodes the object once; each read is a copy of the
	// caller's own.
	mine, err := store.GetConfigMap(ctx, "default", "kube-root-ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	mine.Data["ca.crt"], mine.Metadata.Name = "mine", "mine"
	if again, err := store.GetConfigMap(ctx, "default", "kube-root-ca.crt"); err != nil || again.GetData()["ca.crt"] != "one" || again.GetMetadata().GetName() != "kube-root-ca.crt" {
		t.Fatalf("read after a caller changed its copy: %v, %v; want the stored ConfigMap", again, err)
	}

	// A shared read is the cache's own object, the same for every reader,
	// until the ConfigMap changes; the object a reader holds never does.
	shared, err := store.GetSharedConfigMap(ctx, "default", "kube-root-ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := store.GetSharedConfigMap(ctx, "default", "kube-root-ca.crt"); err != nil || again != shared || shared.GetData()["ca.crt"] != "one" {
		t.Fatalf("shared reads %p and %p (%v, %v), want one object of the stored ConfigMap", shared, again, again, err)
	}

	cm.Data["ca.crt"] = "two"
	if _, err := objects.Mutate(ctx, real, "default", "kube-root-ca.crt", func(c *corev1.ConfigMap) error { c.Data = cm.Data; return nil }); err != nil {
		t.Fatal(err)
	}
	eventually("the cache follows an update", data("two"))
	if again, err := store.GetSharedConfigMap(ctx, "default", "kube-root-ca.crt"); err != nil || again == shared || again.GetData()["ca.crt"] != "two" || shared.GetData()["ca.crt"] != "one" {
		t.Errorf("shared read after an update: %v, %v (the earlier one now %v); want the new ConfigMap, the earlier unchanged", again, err, shared)
	}
	if _, err := real.Create(ctx, &corev1.Secret{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "later"}, Data: map[string][]byte{"k": []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	eventually("the cache sees a creation", func() bool {
		s, err := store.GetSecret(ctx, "default", "later")
		return err == nil && string(s.GetData()["k"]) == "v"
	})
	if _, err := real.Delete(ctx, objects.ConfigMaps, "default", "kube-root-ca.crt", 0); err != nil {
		t.Fatal(err)
	}
	eventually("the cache sees a deletion", func() bool {
		_, err := store.GetConfigMap(ctx, "default", "kube-root-ca.crt")
		return errors.Is(err, nodeagent.ErrNotFound)
	})

	// Unreferenced: read from the store.
	for i := range 50 {
		store.UnregisterPod(string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	if _, err := real.Create(ctx, &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "three"}}); err != nil {
		t.Fatal(err)
	}
	gets0, _ = kv.counts()
	if !data("three")() {
		t.Fatal("an unreferenced ConfigMap is not read from the store")
	}
	if gets, _ := kv.counts(); gets != gets0+1 {
		t.Errorf("%d store gets for an unreferenced ConfigMap, want 1", gets-gets0)
	}
}

// stuckListKV is a real store whose lists never answer.
type stuckListKV struct{ objects.KV }

func (stuckListKV) List(ctx context.Context, _ string, _ ...raftstore.ReadOption) ([]*raftstore.KV, int64, error) {
	<-ctx.Done()
	return nil, 0, ctx.Err()
}

// TestObjectCacheReadsTheStoreWhenItsWatchIsNotIn: a referenced object
// whose watch has not made its first read within a second (a store
// replica slow to answer) is read from the store, so a pod's mount never
// waits on the cache.
func TestObjectCacheReadsTheStoreWhenItsWatchIsNotIn(t *testing.T) {
	cluster := raftstoretest.MakeCluster(t, 1)
	real := objects.FromKV(stuckListKV{objects.New(cluster.Client(t)).KV()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := nodewire.NewStore(real).WithObjectCache(ctx)
	if _, err := real.Create(ctx, &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "app"}, Data: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	store.RegisterPod(&corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "p", Uid: "u"},
		Spec: &corev1.PodSpec{Volumes: []*corev1.Volume{{Name: "v", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "app"}}}}})
	got, err := store.GetConfigMap(ctx, "default", "app")
	if err != nil || got.GetData()["k"] != "v" {
		t.Fatalf("GetConfigMap: %v, %v; want the stored ConfigMap", got, err)
	}
}

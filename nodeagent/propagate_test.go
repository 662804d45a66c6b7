package nodeagent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// A running pod's updates reach its volumes as kubelet's do: new labels,
// delivered by a bind redelivered for the pod (a reconcile), make the
// worker re-resolve its downwardAPI volume and mount it again; a changed
// ConfigMap reaches its configMap volume on the next SyncPeriod. Only the
// volume whose files changed is mounted again.
func TestPodUpdatesReachVolumes(t *testing.T) {
	e, a := fastSyncEnv(t)

	e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "app-config"}, Data: map[string]string{"greeting": "hello"}})
	p := newPod("propagate", func(p *corev1.Pod) {
		p.Metadata.Labels = map[string]string{"app": "web"}
		p.Spec.Volumes = []*corev1.Volume{
			{Name: "podinfo", DownwardApi: &corev1.DownwardAPIVolumeSource{Items: []*corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}},
			{Name: "config", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "app-config"}},
		}
	})
	e.bind(p)
	e.waitStatus(p.Metadata.Uid, "Running and Ready", runningReady)
	uid := p.Metadata.Uid
	wantFile := func(vol, path, want string, mounts int) {
		t.Helper()
		err := e.rt.WaitVolume(e.ctx(), uid, vol, func(files map[string][]byte, n int) bool {
			return string(files[path]) == want && n == mounts
		})
		if err != nil {
			t.Fatalf("volume %q file %q = %q after %d mounts: %v", vol, path, want, mounts, err)
		}
	}
	wantFile("podinfo", "labels", `app="web"`, 1)
	wantFile("config", "greeting", "hello", 1)

	// The labels change in the store; the bind is redelivered.
	p.Metadata.Labels = map[string]string{"app": "web", "tier": "front"}
	e.bind(p)
	wantFile("podinfo", "labels", "app=\"web\"\ntier=\"front\"", 2)

	e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "app-config"}, Data: map[string]string{"greeting": "bonjour"}})
	wantFile("config", "greeting", "bonjour", 2)
	// Re-syncs since then found podinfo unchanged: not mounted again.
	wantFile("podinfo", "labels", "app=\"web\"\ntier=\"front\"", 2)

	// A reconcile hands the same update again: nothing is mounted again.
	if err := a.Reconcile(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "app-config"}, Data: map[string]string{"greeting": "hallo"}})
	wantFile("config", "greeting", "hallo", 3)
	wantFile("podinfo", "labels", "app=\"web\"\ntier=\"front\"", 2)
}

// A projected volume is re-synced as kubelet re-syncs it: a changed Secret
// reaches the running pod's volume on the next SyncPeriod, next to the
// ConfigMap's files that did not change.
func TestProjectedVolumeUpdates(t *testing.T) {
	e, _ := fastSyncEnv(t)
	e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "app-config"}, Data: map[string]string{"greeting": "hello"}})
	e.store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "creds"}, Data: map[string][]byte{"pass": []byte("one")}})
	p := newPod("projected", func(p *corev1.Pod) {
		p.Spec.Volumes = []*corev1.Volume{{Name: "all", Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{Name: "app-config"}},
			{Secret: &corev1.SecretProjection{Name: "creds", Items: []*corev1.KeyToPath{{Key: "pass", Path: "secret/pass"}}}},
		}}}}
	})
	e.bind(p)
	e.waitStatus(p.Metadata.Uid, "Running and Ready", runningReady)
	want := func(pass string, mounts int) {
		t.Helper()
		err := e.rt.WaitVolume(e.ctx(), p.Metadata.Uid, "all", func(files map[string][]byte, n int) bool {
			return string(files["greeting"]) == "hello" && string(files["secret/pass"]) == pass && n == mounts
		})
		if err != nil {
			t.Fatalf("volume all: want greeting=hello, secret/pass=%s after %d mounts: %v", pass, mounts, err)
		}
	}
	want("one", 1)
	e.store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "creds"}, Data: map[string][]byte{"pass": []byte("two")}})
	want("two", 2)
}

// fastSyncEnv is an env whose agent re-syncs volumes every 50 ms.
func fastSyncEnv(t *testing.T) (*env, *nodeagent.Agent) {
	e := newEnv(t)
	e.agent.Stop()
	cfg := fastConfig()
	cfg.SyncPeriod = 50 * time.Millisecond
	a, err := nodeagent.New(cfg, e.rt, e.store, e.pub)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	e.agent = a
	if err := a.Start(e.ctx()); err != nil {
		t.Fatal(err)
	}
	return e, a
}

// Pods that mount the same version of a ConfigMap share its files' bytes
// (one copy of kube-root-ca.crt for all the token volumes of the
// process), and every new version reaches them: a changed ConfigMap (a
// new resourceVersion) and one deleted and created again (a new uid,
// whatever its resourceVersion) are mounted anew, never served from the
// copy of an older one.
func TestSharedConfigMapVersions(t *testing.T) {
	e, _ := fastSyncEnv(t)
	put := func(uid, rv, greeting string) {
		e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "shared-config", Uid: uid, ResourceVersion: rv},
			Data: map[string]string{"greeting": greeting}})
	}
	put("cm-1", "1", "hello")
	var uids []string
	for _, name := range []string{"share-a", "share-b"} {
		p := newPod(name, func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{
				{Name: "config", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "shared-config"}},
				{Name: "projected", Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{Name: "shared-config"}}}}},
			}
		})
		e.bind(p)
		e.waitStatus(p.Metadata.Uid, "Running and Ready", runningReady)
		uids = append(uids, p.Metadata.Uid)
	}
	want := func(greeting string) [][]byte {
		t.Helper()
		var got [][]byte
		for _, uid := range uids {
			for _, vol := range []string{"config", "projected"} {
				err := e.rt.WaitVolume(e.ctx(), uid, vol, func(files map[string][]byte, _ int) bool {
					if string(files["greeting"]) != greeting {
						return false
					}
					got = append(got, files["greeting"])
					return true
				})
				if err != nil {
					t.Fatalf("pod %s volume %s: want greeting=%s: %v", uid, vol, greeting, err)
				}
			}
		}
		return got
	}
	files := want("hello")
	for _, f := range files[1:] {
		if &f[0] != &files[0][0] {
			t.Fatalf("the pods' volumes hold copies of the same ConfigMap version, want one shared")
		}
	}
	put("cm-1", "2", "bonjour") // updated
	want("bonjour")
	put("cm-2", "2", "hallo") // deleted and created again: a new uid
	want("hallo")
	put("cm-2", "3", "hello") // updated back to the first version's data
	want("hello")
}

// sharedReads is a store that reads ConfigMaps shared
// (nodeagent.SharedConfigMapGetter) and counts the reads of each kind.
type sharedReads struct {
	*nodeagenttest.Store
	mu             sync.Mutex
	shared, copied int
}

func (s *sharedReads) GetSharedConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	s.mu.Lock()
	s.shared++
	s.mu.Unlock()
	return s.Store.GetConfigMap(ctx, ns, name)
}

func (s *sharedReads) GetConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	s.mu.Lock()
	s.copied++
	s.mu.Unlock()
	return s.Store.GetConfigMap(ctx, ns, name)
}

// TestVolumesReadConfigMapsShared: over a store that reads ConfigMaps
// shared, the configMap and projected volumes read them that way, and
// their files are the ConfigMaps'.
func TestVolumesReadConfigMapsShared(t *testing.T) {
	e := newEnv(t)
	st := &sharedReads{Store: e.store}
	e.replaceAgent(fastConfig(), e.rt, st)
	e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "app-config", Uid: "cm-uid", ResourceVersion: "1"},
		Data: map[string]string{"greeting": "hello"}})
	p := newPod("shared", func(p *corev1.Pod) {
		p.Spec.Volumes = []*corev1.Volume{
			{Name: "config", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "app-config"}},
			{Name: "all", Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{Name: "app-config"}}}}},
		}
	})
	e.bind(p)
	e.waitStatus(p.Metadata.Uid, "Running and Ready", runningReady)
	for _, vol := range []string{"config", "all"} {
		err := e.rt.WaitVolume(e.ctx(), p.Metadata.Uid, vol, func(files map[string][]byte, _ int) bool { return string(files["greeting"]) == "hello" })
		if err != nil {
			t.Fatalf("volume %q: %v", vol, err)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.shared < 2 || st.copied != 0 {
		t.Errorf("%d shared and %d copied ConfigMap reads for two volumes, want 2 or more shared, none copied", st.shared, st.copied)
	}
}

package crds_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/crds"
)

// world is an in-memory store with a Catalog (which registers the
// definitions' kinds, as in the api process) and the Controller.
type world struct {
	t     *testing.T
	store *objects.Store
	cat   *crd.Catalog
	ctx   context.Context
}

func newWorld(t *testing.T) *world {
	t.Helper()
	st := objects.FromKV(objectstest.New())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	g, gctx := errgroup.WithContext(ctx)
	cat, err := crd.NewCatalog(crd.Config{Store: st, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	cfg := crds.DefaultConfig()
	cfg.RetryInterval = 50 * time.Millisecond
	cfg.DeleteBatch = 7
	c, err := crds.New(stage.Env{Store: st, Log: log, Stage: "api", Replica: "api-1"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	return &world{t: t, store: st, cat: cat, ctx: ctx}
}

func (w *world) create(c *apiextensionsv1.CustomResourceDefinition) {
	w.t.Helper()
	c.APIVersion, c.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(c)
	m, err := manifest.FromKube(c)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.store.Create(w.ctx, m.(objects.Object)); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { objects.Unregister(c.Spec.Group, c.Spec.Names.Kind) })
}

func (w *world) get(name string) *apiextensionsv1.CustomResourceDefinition {
	w.t.Helper()
	u, err := w.store.GetKind(w.ctx, objects.CustomResourceDefinitions, "", name)
	if err != nil {
		return nil
	}
	d, err := crd.Decode(u.(*corev1.Unstructured))
	if err != nil {
		w.t.Fatal(err)
	}
	return d
}

func (w *world) eventually(what string, ok func() bool) {
	w.t.Helper()
	for !ok() {
		if w.ctx.Err() != nil {
			w.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func cronTabs(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile("../../crd/testdata/crontabs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEstablishAndNameConflicts: a definition gets NamesAccepted and
// Established; a second one of the same group asking for a plural and a
// kind already taken gets NamesAccepted False with kube's reason and
// message and is not served, until the first one goes.
func TestEstablishAndNameConflicts(t *testing.T) {
	w := newWorld(t)
	w.create(cronTabs(t))
	w.eventually("crontabs established", func() bool {
		d := w.get("crontabs.stable.example.com")
		return d != nil && apihelpers.IsCRDConditionTrue(d, apiextensionsv1.Established)
	})
	d := w.get("crontabs.stable.example.com")
	if c := apihelpers.FindCRDCondition(d, apiextensionsv1.NamesAccepted); c.Reason != "NoConflicts" || c.Message != "no conflicts found" ||
		d.Status.AcceptedNames.Plural != "crontabs" || d.Status.AcceptedNames.ShortNames[0] != "ct" {
		t.Fatalf("names %+v, condition %+v", d.Status.AcceptedNames, c)
	}
	if c := apihelpers.FindCRDCondition(d, apiextensionsv1.Established); c.Reason != "InitialNamesAccepted" {
		t.Fatalf("Established %+v", c)
	}

	clash := cronTabs(t)
	clash.Name = "othertabs.stable.example.com"
	clash.Spec.Names.Plural, clash.Spec.Names.Singular, clash.Spec.Names.ShortNames = "othertabs", "othertab", nil
	w.create(clash)
	w.eventually("othertabs' names decided", func() bool {
		d := w.get("othertabs.stable.example.com")
		return d != nil && apihelpers.FindCRDCondition(d, apiextensionsv1.NamesAccepted) != nil
	})
	d = w.get("othertabs.stable.example.com")
	if c := apihelpers.FindCRDCondition(d, apiextensionsv1.NamesAccepted); c.Status != apiextensionsv1.ConditionFalse ||
		c.Reason != "ListKindConflict" || c.Message != `"CronTabList" is already in use` {
		t.Fatalf("NamesAccepted of the clash %+v", c)
	}
	if c := apihelpers.FindCRDCondition(d, apiextensionsv1.Established); c.Status != apiextensionsv1.ConditionFalse || c.Reason != "NotAccepted" {
		t.Fatalf("Established of the clash %+v", c)
	}
	if d.Status.AcceptedNames.Plural != "othertabs" || d.Status.AcceptedNames.Kind != "" {
		t.Fatalf("accepted names of the clash %+v", d.Status.AcceptedNames)
	}
	if _, ok := w.cat.Lookup("stable.example.com", "v1", "othertabs"); ok {
		t.Fatal("a definition whose names clash is served")
	}

	// The first goes (no objects, so no finalizer work is left): the
	// second takes its kind.
	if _, err := w.store.Delete(w.ctx, objects.CustomResourceDefinitions, "", "crontabs.stable.example.com", 0); err != nil {
		t.Fatal(err)
	}
	w.eventually("othertabs established", func() bool {
		d := w.get("othertabs.stable.example.com")
		return d != nil && apihelpers.IsCRDConditionTrue(d, apiextensionsv1.Established) && d.Status.AcceptedNames.Kind == "CronTab"
	})
}

// TestCleanupFinalizer: a definition marked for deletion (as the api
// stage marks it) has its objects deleted in every namespace, in
// batches, then its finalizer removed and itself with it; an object
// with a finalizer of its own is marked and holds the definition until
// it goes.
func TestCleanupFinalizer(t *testing.T) {
	w := newWorld(t)
	w.create(cronTabs(t))
	w.eventually("crontabs served", func() bool {
		_, ok := w.cat.Lookup("stable.example.com", "v1", "crontabs")
		return ok
	})
	for i := range 20 {
		u := &corev1.Unstructured{ApiVersion: "stable.example.com/v1", Kind: "CronTab",
			Metadata: &corev1.ObjectMeta{Namespace: []string{"a", "b", "c"}[i%3], Name: "t" + string(rune('a'+i)), Uid: "u"}}
		if i == 5 {
			u.Metadata.Finalizers = []string{"example.com/hold"}
		}
		if _, err := w.store.Create(w.ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	d := w.get("crontabs.stable.example.com")
	u, _ := w.store.GetKind(w.ctx, objects.CustomResourceDefinitions, "", d.Name)
	// What the api stage's DELETE does first.
	d.Finalizers = append(d.Finalizers, apiextensionsv1.CustomResourceCleanupFinalizer)
	ts := metav1.Now()
	d.DeletionTimestamp = &ts
	m, _ := manifest.FromKube(d)
	objects.SetRevision(m.(objects.Object), objects.Revision(u))
	if _, err := w.store.Update(w.ctx, m.(objects.Object)); err != nil {
		t.Fatal(err)
	}
	k, err := objects.KindForResource("crontabs.stable.example.com")
	if err != nil {
		t.Fatal(err)
	}
	w.eventually("every object but the held one gone", func() bool {
		objs, _, err := w.store.ListKind(w.ctx, k, "")
		return err == nil && len(objs) == 1 && objs[0].GetMetadata().GetDeletionTimestamp() != nil
	})
	if d := w.get("crontabs.stable.example.com"); d == nil || !apihelpers.CRDHasFinalizer(d, apiextensionsv1.CustomResourceCleanupFinalizer) ||
		apihelpers.FindCRDCondition(d, apiextensionsv1.Terminating).Reason != "InstanceDeletionInProgress" {
		t.Fatalf("the definition while an object holds it: %+v", d)
	}
	held, err := w.store.GetKind(w.ctx, k, "c", "tf")
	if err != nil {
		t.Fatal(err)
	}
	held.GetMetadata().Finalizers = nil
	if _, err := w.store.Update(w.ctx, held); err != nil { // its owner lets go (the api stage would then delete it)
		t.Fatal(err)
	}
	if _, err := w.store.Delete(w.ctx, k, "c", "tf", 0); err != nil {
		t.Fatal(err)
	}
	w.eventually("the definition gone", func() bool { return w.get("crontabs.stable.example.com") == nil })
}

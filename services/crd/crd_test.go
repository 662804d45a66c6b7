package crd_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/yaml"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

// cronTabs is testdata/crontabs.yaml, defaulted as its strategy defaults
// it, with its names accepted and established (what the CRD controller
// does).
func cronTabs(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile("testdata/crontabs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		t.Fatal(err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(c)
	accept(c)
	return c
}

func accept(c *apiextensionsv1.CustomResourceDefinition) {
	c.Status.AcceptedNames = c.Spec.Names
	now := metav1.Now()
	c.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{
		{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts", LastTransitionTime: now},
		{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted", LastTransitionTime: now},
	}
	c.Status.StoredVersions = []string{"v1"}
	if c.UID == "" {
		c.UID = "crd-uid"
	}
}

func stored(t *testing.T, c *apiextensionsv1.CustomResourceDefinition) *corev1.Unstructured {
	t.Helper()
	m, err := manifest.FromKube(c)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*corev1.Unstructured)
}

// catalog starts a Catalog over an in-memory store holding defs.
func catalog(t *testing.T, defs ...*apiextensionsv1.CustomResourceDefinition) (*crd.Catalog, *objects.Store) {
	t.Helper()
	st := objects.FromKV(objectstest.New())
	ctx, cancel := context.WithCancel(context.Background())
	for _, d := range defs {
		if _, err := st.Create(ctx, stored(t, d)); err != nil {
			t.Fatal(err)
		}
	}
	cat, err := crd.NewCatalog(crd.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	g, gctx := errgroup.WithContext(ctx)
	if err := cat.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = g.Wait()
		for _, d := range defs {
			objects.Unregister(d.Spec.Group, d.Spec.Names.Kind)
		}
	})
	return cat, st
}

func cr(t *testing.T, y string) *corev1.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.FromKube(u)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*corev1.Unstructured)
}

func kube(t *testing.T, u *corev1.Unstructured) *unstructured.Unstructured {
	t.Helper()
	k, err := manifest.ToKube(u)
	if err != nil {
		t.Fatal(err)
	}
	return k.(*unstructured.Unstructured)
}

// builtinsNone is a Builtin preparer that fails the test if called: every
// object of these tests is a custom resource.
type builtinsNone struct{ t *testing.T }

func (b builtinsNone) PrepareCreate(context.Context, *corev1.UserInfo, string, *corev1.Unstructured) ([]string, *corev1.Status) {
	b.t.Fatal("a custom resource went to the built-in registry")
	return nil, nil
}

func (b builtinsNone) PrepareUpdate(context.Context, *corev1.UserInfo, string, *corev1.Unstructured, *corev1.Unstructured) ([]string, *corev1.Status) {
	b.t.Fatal("a custom resource went to the built-in registry")
	return nil, nil
}

const tab = `apiVersion: stable.example.com/v1
kind: CronTab
metadata: {name: nightly, namespace: ns}
spec: {cronSpec: "0 3 * * *", image: backup, replicas: 2, unknownField: x}
status: {replicas: 5}
`

// TestCreatePrunesDefaultsValidates: a custom resource is created as
// kube-apiserver creates one: unknown fields pruned, the schema's
// defaults, status dropped (a status subresource), generation 1, uid and
// creationTimestamp; a CEL rule's violation is 422 with its message.
func TestCreatePrunesDefaultsValidates(t *testing.T) {
	cat, _ := catalog(t, cronTabs(t))
	reg := crd.Registry{Builtin: builtinsNone{t}, Catalog: cat}
	obj := cr(t, tab)
	if _, st := reg.PrepareCreate(context.Background(), nil, "", obj); st != nil {
		t.Fatalf("PrepareCreate: %v", st)
	}
	u := kube(t, obj)
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "unknownField"); found {
		t.Error("spec.unknownField was not pruned")
	}
	if c, _, _ := unstructured.NestedString(u.Object, "spec", "color"); c != "blue" {
		t.Errorf("spec.color %q, want the default blue", c)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status"); found {
		t.Error("status was kept on create")
	}
	if u.GetGeneration() != 1 || u.GetUID() == "" || u.GetCreationTimestamp().Time.IsZero() {
		t.Errorf("system fields: generation %d uid %q created %v", u.GetGeneration(), u.GetUID(), u.GetCreationTimestamp())
	}

	bad := cr(t, strings.Replace(tab, "replicas: 2", "replicas: 2, minReplicas: 3", 1))
	_, st := reg.PrepareCreate(context.Background(), nil, "", bad)
	const msg = `CronTab.stable.example.com "nightly" is invalid: spec: Invalid value: replicas must be at least minReplicas`
	if st.GetCode() != 422 || st.GetReason() != "Invalid" || st.GetMessage() != msg {
		t.Fatalf("CEL violation: %v\nwant %s", st, msg)
	}

	typed := cr(t, strings.Replace(tab, `image: backup`, `image: 7`, 1))
	if _, st := reg.PrepareCreate(context.Background(), nil, "", typed); st.GetCode() != 422 ||
		!strings.Contains(st.GetMessage(), `spec.image: Invalid value: "integer": spec.image in body must be of type string: "integer"`) {
		t.Fatalf("schema violation: %v", st)
	}
}

// TestUpdateSemantics: an update keeps the stored status and bumps the
// generation on a spec change; an update through status changes only
// status; a write in the served version v2 is stored in v1.
func TestUpdateSemantics(t *testing.T) {
	cat, _ := catalog(t, cronTabs(t))
	reg := crd.Registry{Builtin: builtinsNone{t}, Catalog: cat}
	ctx := context.Background()
	old := cr(t, tab)
	if _, st := reg.PrepareCreate(ctx, nil, "", old); st != nil {
		t.Fatal(st)
	}
	old.Metadata.ResourceVersion = "7"

	status := kube(t, proto.CloneOf(old))
	_ = unstructured.SetNestedField(status.Object, int64(3), "status", "replicas")
	_ = unstructured.SetNestedField(status.Object, "changed", "spec", "image")
	next := fromKube(t, status)
	if _, st := reg.PrepareUpdate(ctx, nil, "status", next, old); st != nil {
		t.Fatal(st)
	}
	u := kube(t, next)
	if r, _, _ := unstructured.NestedInt64(u.Object, "status", "replicas"); r != 3 {
		t.Errorf("status.replicas %d after a status update, want 3", r)
	}
	if img, _, _ := unstructured.NestedString(u.Object, "spec", "image"); img != "backup" || u.GetGeneration() != 1 {
		t.Errorf("a status update changed spec.image to %q, generation %d", img, u.GetGeneration())
	}

	withStatus := next
	spec := kube(t, proto.CloneOf(withStatus))
	_ = unstructured.SetNestedField(spec.Object, "changed", "spec", "image")
	_ = unstructured.SetNestedField(spec.Object, int64(9), "status", "replicas")
	spec.SetAPIVersion("stable.example.com/v2")
	next = fromKube(t, spec)
	if _, st := reg.PrepareUpdate(ctx, nil, "", next, withStatus); st != nil {
		t.Fatal(st)
	}
	u = kube(t, next)
	if u.GetAPIVersion() != "stable.example.com/v1" {
		t.Errorf("stored as %s, want the storage version v1", u.GetAPIVersion())
	}
	if img, _, _ := unstructured.NestedString(u.Object, "spec", "image"); img != "changed" || u.GetGeneration() != 2 {
		t.Errorf("spec update: image %q generation %d, want changed, 2", img, u.GetGeneration())
	}
	if r, _, _ := unstructured.NestedInt64(u.Object, "status", "replicas"); r != 3 {
		t.Errorf("an update of the object changed status.replicas to %d", r)
	}
}

func fromKube(t *testing.T, u *unstructured.Unstructured) *corev1.Unstructured {
	t.Helper()
	m, err := manifest.FromKube(u)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*corev1.Unstructured)
}

// TestFromStorage: a stored object read in another version is converted
// and defaulted by that version's schema (v2's default color is green; a
// stored color stays).
func TestFromStorage(t *testing.T) {
	cat, _ := catalog(t, cronTabs(t))
	v2, ok := cat.Lookup("stable.example.com", "v2", "crontabs")
	if !ok {
		t.Fatal("v2 not served")
	}
	u := kube(t, cr(t, "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {name: a, namespace: ns}\nspec: {image: x}\n"))
	out, err := v2.FromStorage(u)
	if err != nil {
		t.Fatal(err)
	}
	if out.GetAPIVersion() != "stable.example.com/v2" {
		t.Errorf("apiVersion %s", out.GetAPIVersion())
	}
	if c, _, _ := unstructured.NestedString(out.Object, "spec", "color"); c != "green" {
		t.Errorf("spec.color %q, want v2's default green", c)
	}
	if u.GetAPIVersion() != "stable.example.com/v1" {
		t.Error("FromStorage changed its input")
	}
}

// TestDecodeStrict: field validation finds unknown fields (pruning's
// paths, metadata's too) and duplicate fields, worded as
// kube-apiserver's.
func TestDecodeStrict(t *testing.T) {
	cat, _ := catalog(t, cronTabs(t))
	v1, _ := cat.Lookup("stable.example.com", "v1", "crontabs")
	body := `{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"a","unknownMeta":1},"spec":{"image":"x","image":"y","bogus":true}}`
	u, errs, err := v1.Decode([]byte(body), true)
	if err != nil {
		t.Fatal(err)
	}
	got := crd.StrictError(errs).Error()
	for _, want := range []string{`duplicate field "spec.image"`, `unknown field "spec.bogus"`, `unknown field "metadata.unknownMeta"`} {
		if !strings.Contains(got, want) {
			t.Errorf("strict errors %q lack %q", got, want)
		}
	}
	if img, _, _ := unstructured.NestedString(u.Object, "spec", "image"); img != "y" {
		t.Errorf("spec.image %q", img)
	}
	if _, errs, _ := v1.Decode([]byte(body), false); len(errs) != 0 {
		t.Errorf("non-strict decode reported %v", errs)
	}
	y := "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {name: a}\nspec:\n  image: x\n  image: y\n"
	if _, errs, err := v1.Decode([]byte(y), true); err != nil || !strings.Contains(crd.StrictError(errs).Error(), `key "image" already set in map`) {
		t.Errorf("YAML duplicates: %v %v", errs, err)
	}
}

// TestTableAndSelectableFields: kubectl get's columns are the
// definition's printer columns; field selectors see selectableFields
// with their defaults.
func TestTableAndSelectableFields(t *testing.T) {
	cat, _ := catalog(t, cronTabs(t))
	reg := crd.Registry{Builtin: builtinsNone{t}, Catalog: cat}
	v1, _ := cat.Lookup("stable.example.com", "v1", "crontabs")
	var names []string
	for _, c := range v1.TableColumns() {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "Name,Spec,Replicas,Age" {
		t.Fatalf("columns %v", names)
	}
	obj := cr(t, tab)
	if _, st := reg.PrepareCreate(context.Background(), nil, "", obj); st != nil {
		t.Fatal(st)
	}
	cells, err := v1.TableCells(kube(t, obj))
	if err != nil || len(cells) != 4 || cells[0] != "nightly" || cells[1] != "0 3 * * *" || cells[2] != int64(2) {
		t.Fatalf("cells %v %v", cells, err)
	}
	_, fs, err := v1.Attrs(kube(t, obj))
	if err != nil {
		t.Fatal(err)
	}
	if !fields.ParseSelectorOrDie("spec.color=blue,metadata.namespace=ns").Matches(fields.Set(fs)) {
		t.Errorf("selectable fields %v", fs)
	}
}

// TestCatalogFollowsTheStore: a definition written to the store is
// served (its kind registered); one whose names are not accepted is not;
// a deleted one goes, its kind with it.
func TestCatalogFollowsTheStore(t *testing.T) {
	cat, st := catalog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := cronTabs(t)
	pending := c.DeepCopy()
	pending.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	rev, err := st.Create(ctx, stored(t, pending))
	if err != nil {
		t.Fatal(err)
	}
	if !cat.WaitFor(ctx, c.Name, rev) {
		t.Fatal("the catalog did not see the definition")
	}
	if _, ok := cat.Lookup("stable.example.com", "v1", "crontabs"); ok {
		t.Fatal("a definition without accepted names is served")
	}
	u := stored(t, c)
	objects.SetRevision(u, rev)
	if rev, err = st.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	if !cat.WaitFor(ctx, c.Name, rev) {
		t.Fatal("the catalog did not see the update")
	}
	if _, ok := cat.Lookup("stable.example.com", "v2", "crontabs"); !ok {
		t.Fatal("v2 not served once established")
	}
	if k, err := objects.KindForResource("ct"); err != nil || k.Prefix("") != "/registry/stable.example.com/crontabs/" || k.Version != "v1" {
		t.Fatalf("registered kind %+v %v", k, err)
	}
	if _, err := st.Delete(ctx, objects.CustomResourceDefinitions, "", c.Name, 0); err != nil {
		t.Fatal(err)
	}
	for ctx.Err() == nil {
		if _, ok := cat.Lookup("stable.example.com", "v1", "crontabs"); !ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := objects.KindForResource("crontabs.stable.example.com"); !errors.Is(err, objects.ErrUnknownKind) {
		t.Errorf("the kind is still registered: %v", err)
	}
}

// certManager is cert-manager's published Certificate definition
// (testdata/cert-manager), accepted and established.
func certManager(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile("testdata/cert-manager/certificates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, doc, _ := strings.Cut(string(b), "\n---\n") // past the licence header
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(doc), c); err != nil {
		t.Fatal(err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(c)
	accept(c)
	return c
}

// TestCertManagerCertificate: cert-manager's Certificate definition is
// served, and its objects validate as kube-apiserver validates them:
// a valid one is accepted, one without its required fields or with an
// enum value the schema does not list is refused with kube-apiserver's
// messages, and printer columns read its status.
func TestCertManagerCertificate(t *testing.T) {
	cat, _ := catalog(t, certManager(t))
	reg := crd.Registry{Builtin: builtinsNone{t}, Catalog: cat}
	const valid = `apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: web, namespace: shop}
spec:
  secretName: web-tls
  dnsNames: [web.example.com]
  duration: 2160h
  privateKey: {algorithm: ECDSA, size: 256, rotationPolicy: Always}
  issuerRef: {name: letsencrypt, kind: ClusterIssuer}
`
	if _, st := reg.PrepareCreate(context.Background(), nil, "", cr(t, valid)); st != nil {
		t.Fatalf("a valid Certificate: %v", st)
	}
	_, st := reg.PrepareCreate(context.Background(), nil, "", cr(t, strings.Replace(valid, "  secretName: web-tls\n", "", 1)))
	if st.GetCode() != 422 || !strings.Contains(st.GetMessage(), `spec.secretName: Required value`) {
		t.Fatalf("no secretName: %v", st)
	}
	_, st = reg.PrepareCreate(context.Background(), nil, "", cr(t, strings.Replace(valid, "algorithm: ECDSA", "algorithm: DSA", 1)))
	if st.GetCode() != 422 || !strings.Contains(st.GetMessage(), `spec.privateKey.algorithm: Unsupported value: "DSA": supported values: "RSA", "ECDSA", "Ed25519"`) {
		t.Fatalf("a DSA key: %v", st)
	}
	v1, ok := cat.Lookup("cert-manager.io", "v1", "certificates")
	if !ok {
		t.Fatal("certificates not served")
	}
	var cols []string
	for _, c := range v1.TableColumns() {
		cols = append(cols, c.Name)
	}
	if strings.Join(cols, ",") != "Name,Ready,Secret,Issuer,Status,Expiration,Age" {
		t.Fatalf("columns %v", cols)
	}
	u := kube(t, cr(t, valid+"status:\n  conditions: [{type: Ready, status: \"True\", message: issued}]\n"))
	cells, err := v1.TableCells(u)
	if err != nil || cells[1] != "True" || cells[2] != "web-tls" || cells[3] != "letsencrypt" || cells[4] != "issued" {
		t.Fatalf("cells %v %v", cells, err)
	}
}

// TestKindKeptAcrossDefinitionUpdates: while a served definition is
// updated again and again (its status, as the CRD controller writes it),
// its objects' kind never becomes unknown, not even for a moment: the
// catalog replaces the kind in place rather than dropping and adding it.
func TestKindKeptAcrossDefinitionUpdates(t *testing.T) {
	def := cronTabs(t)
	cat, st := catalog(t, def)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe := &corev1.Unstructured{ApiVersion: "stable.example.com/v1", Kind: "CronTab"}
	if _, err := objects.KindOf(probe); err != nil {
		t.Fatalf("the served definition's kind: %v", err)
	}
	done := make(chan struct{})
	misses := make(chan error, 1)
	go func() {
		defer close(misses)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := objects.KindOf(probe); err != nil {
				misses <- err
				return
			}
		}
	}()
	name := def.Name
	for i := range 300 {
		d, ok := cat.Get(name)
		if !ok {
			t.Fatal("definition gone")
		}
		u, err := st.GetKind(ctx, objects.CustomResourceDefinitions, "", name)
		if err != nil {
			t.Fatal(err)
		}
		u.GetMetadata().Annotations = map[string]string{"update": string(rune('a' + i%26))}
		rev, err := st.Update(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		for d.Revision < rev { // wait for the catalog to observe it
			if ctx.Err() != nil {
				t.Fatalf("update %d never observed", i)
			}
			time.Sleep(100 * time.Microsecond)
			if d, ok = cat.Get(name); !ok {
				t.Fatal("definition gone")
			}
		}
	}
	close(done)
	if err := <-misses; err != nil {
		t.Fatalf("the kind was unknown during a definition update: %v", err)
	}
}

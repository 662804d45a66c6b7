package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// TestKubectlCustomResources drives CustomResourceDefinitions with the
// stock kubectl against `podflow up` (3 store replicas, 2 api replicas
// behind one port, so consecutive commands reach either): a definition
// with two versions, defaults, a CEL rule and a status subresource is
// established; its objects are defaulted and pruned, a CEL violation is
// refused with its message, status changes only through /status, 5,000
// objects list in pages, a watch from a list's resourceVersion sees
// what follows, and deleting the definition deletes its objects.
// cert-manager's published Certificate definition is served and
// validates its objects as kube-apiserver does.
func TestKubectlCustomResources(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t, "--replicas", "api=2")
	kubeconfig := filepath.Join(c.dir, "kubeconfig")
	k := newKubectl(t, kubeconfig)
	crontabs := filepath.Join(repoRoot, "services/crd/testdata/crontabs.yaml")

	if out := k.must("apply", "-f", crontabs); !strings.Contains(out, "customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com created") {
		t.Fatalf("apply the definition: %q", out)
	}
	k.must("wait", "--for", "condition=established", "--timeout=60s", "crd/crontabs.stable.example.com")

	k.must("create", "namespace", "tabs")
	const tab = `apiVersion: stable.example.com/v1
kind: CronTab
metadata: {name: nightly, namespace: tabs}
spec: {cronSpec: "0 3 * * *", image: backup, replicas: 2, unknownField: x}
`
	// Strict field validation (kubectl's default) names the unknown field;
	// without it the field is pruned.
	if _, errs, code := k.runIn(tab, "apply", "-f", "-"); code == 0 || !strings.Contains(errs, `unknown field "spec.unknownField"`) {
		t.Fatalf("strict apply of an unknown field: exit %d %q", code, errs)
	}
	if out := k.mustIn(tab, "apply", "--validate=false", "-f", "-"); !strings.Contains(out, "crontab.stable.example.com/nightly created") {
		t.Fatalf("apply: %q", out)
	}
	if out := k.must("get", "ct", "nightly", "-n", "tabs", "-o", "jsonpath={.spec.color}/{.spec.unknownField}/{.metadata.generation}"); out != "blue//1" {
		t.Fatalf("default, pruning and generation: %q", out)
	}
	if out := k.must("get", "crontabs.v2.stable.example.com", "nightly", "-n", "tabs", "-o", "jsonpath={.apiVersion}"); out != "stable.example.com/v2" {
		t.Fatalf("read as v2: %q", out)
	}
	bad := "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {name: bad, namespace: tabs}\nspec: {replicas: 1, minReplicas: 3}\n"
	if _, errs, code := k.runIn(bad, "create", "-f", "-"); code == 0 || !strings.Contains(errs, "replicas must be at least minReplicas") {
		t.Fatalf("CEL violation: exit %d %q", code, errs)
	}
	k.must("patch", "crontab", "nightly", "-n", "tabs", "--subresource=status", "--type=merge", "-p", `{"status":{"replicas":3},"spec":{"image":"sneaky"}}`)
	if out := k.must("get", "crontab", "nightly", "-n", "tabs", "-o", "jsonpath={.status.replicas}/{.spec.image}/{.metadata.generation}"); out != "3/backup/1" {
		t.Fatalf("after the status patch: %q", out)
	}
	// kubectl get -w lists, then watches from the list's resourceVersion.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	var wout, werr syncBuffer
	kw := k.cmd(watchCtx, "get", "crontabs", "-n", "tabs", "-w", "-v=6", "-o", `jsonpath={.metadata.name}:{.spec.image}{"\n"}`)
	kw.Stdout, kw.Stderr = &wout, &werr
	if err := kw.Start(); err != nil {
		t.Fatal(err)
	}
	watchDone := make(chan struct{})
	go func() { _ = kw.Wait(); close(watchDone) }()
	defer func() { stopWatch(); <-watchDone }()
	eventually(t, 20*time.Second, "kubectl get crontabs -w to start watching", func() (bool, string) {
		return strings.Contains(werr.String(), "watch=true") && strings.Contains(werr.String(), "resourceVersion="), werr.String()
	})
	k.must("patch", "crontab", "nightly", "-n", "tabs", "--type=merge", "-p", `{"status":{"replicas":9},"spec":{"image":"nightly-backup"}}`)
	eventually(t, 20*time.Second, "the watch to show the patch", func() (bool, string) {
		return strings.Contains(wout.String(), "nightly:backup\nnightly:nightly-backup\n"), wout.String()
	})
	stopWatch()
	<-watchDone
	if out := k.must("get", "crontab", "nightly", "-n", "tabs", "-o", "jsonpath={.status.replicas}/{.spec.image}/{.metadata.generation}"); out != "3/nightly-backup/2" {
		t.Fatalf("after the spec patch: %q", out)
	}
	// The printer columns are v1's; kubectl reads the preferred version,
	// v2, which names none (NAME, AGE) unless asked for v1.
	out := k.must("get", "crontabs.v1.stable.example.com", "-n", "tabs")
	if !regexpLine(out, "NAME", "SPEC", "REPLICAS", "AGE") || !regexpLine(out, "nightly", "0", "3", "*", "*", "*", "2") {
		t.Fatalf("get crontabs.v1:\n%s", out)
	}
	if out := k.must("get", "crontabs", "-n", "tabs"); !regexpLine(out, "NAME", "AGE") || strings.Contains(out, "SPEC") {
		t.Fatalf("get crontabs (v2):\n%s", out)
	}
	// selectableFields are v1's.
	if out := k.must("get", "crontabs.v1.stable.example.com", "-n", "tabs", "--field-selector=spec.color=blue", "-o", "name"); strings.TrimSpace(out) != "crontab.stable.example.com/nightly" {
		t.Fatalf("field selector spec.color=blue: %q", out)
	}
	if out := k.must("get", "crontabs.v1.stable.example.com", "-n", "tabs", "--field-selector=spec.color!=blue", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("field selector spec.color!=blue: %q", out)
	}
	if _, errs, code := k.run("get", "crontabs.v2.stable.example.com", "-n", "tabs", "--field-selector=spec.color=blue"); code == 0 ||
		!strings.Contains(errs, `field label not supported: spec.color`) {
		t.Fatalf("field selector on v2, which selects no fields: exit %d %q", code, errs)
	}
	if out := k.must("get", "batch-like", "-n", "tabs", "-o", "name"); strings.TrimSpace(out) != "crontab.stable.example.com/nightly" {
		t.Fatalf("the category: %q", out)
	}
	// explain reads the OpenAPI v3 document of the version it is given;
	// the descriptions are v1's.
	if out := k.must("explain", "crontab.spec", "--api-version=stable.example.com/v1"); !strings.Contains(out, "What to run and when.") ||
		!strings.Contains(out, "cronSpec\t<string>") || !strings.Contains(out, "The schedule, in cron format.") {
		t.Fatalf("explain v1:\n%s", out)
	}
	if out := k.must("explain", "crontab.spec"); !strings.Contains(out, "VERSION:    v2") || !strings.Contains(out, "cronSpec\t<string>") {
		t.Fatalf("explain v2:\n%s", out)
	}
	// Only v1 has a scale subresource.
	if out := k.must("scale", "crontabs.v1.stable.example.com", "nightly", "-n", "tabs", "--replicas=5"); !strings.Contains(out, "scaled") {
		t.Fatalf("scale: %q", out)
	}
	if out := k.must("get", "crontab", "nightly", "-n", "tabs", "-o", "jsonpath={.spec.replicas}/{.metadata.generation}"); out != "5/3" {
		t.Fatalf("after scale: %q", out)
	}

	// 5,000 objects, created in parallel through HTTPS, listed by kubectl
	// in pages; a watch from the list's resourceVersion.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k.must("create", "namespace", "load")
	gvr := schema.GroupVersionResource{Group: "stable.example.com", Version: "v1", Resource: "crontabs"}
	load := dyn.Resource(gvr).Namespace("load")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const n = 5000
	start := time.Now()
	names := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "stable.example.com/v1", "kind": "CronTab",
					"metadata": map[string]any{"name": fmt.Sprintf("tab-%05d", i)}, "spec": map[string]any{"image": "x"}}}
				if _, err := load.Create(ctx, u, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		names <- i
	}
	close(names)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d creations failed, the first: %v", len(failures), failures[0])
	}
	t.Logf("created %d objects in %s", n, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	out, errs, code := k.run("get", "crontabs", "-n", "load", "--chunk-size=500", "-o", "name", "-v=6")
	if code != 0 {
		t.Fatalf("paged list: %s", errs)
	}
	if lines := strings.Count(out, "\n"); lines != n {
		t.Fatalf("kubectl listed %d objects, want %d", lines, n)
	}
	if pages := strings.Count(errs, "continue="); pages < n/500-1 {
		t.Fatalf("kubectl asked for %d continue pages:\n%s", pages, errs)
	}
	t.Logf("kubectl listed %d objects in pages of 500 in %s", n, time.Since(start).Round(time.Millisecond))
	l, err := load.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := load.Watch(ctx, metav1.ListOptions{ResourceVersion: l.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := load.Patch(ctx, "tab-00042", types.MergePatchType, []byte(`{"spec":{"image":"y"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if u, ok := ev.Object.(*unstructured.Unstructured); !ok || ev.Type != watch.Modified || u.GetName() != "tab-00042" {
			t.Fatalf("watch event %v %v", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("the watch saw nothing")
	}

	// Deleting the definition deletes its objects (kubectl waits for its
	// finalizer), and its resource goes.
	start = time.Now()
	k.must("delete", "crd", "crontabs.stable.example.com", "--timeout=5m")
	t.Logf("deleted the definition and its %d objects in %s", n+1, time.Since(start).Round(time.Millisecond))
	if kvs, _, err := c.store.KV().List(ctx, "/registry/stable.example.com/crontabs/"); err != nil || len(kvs) != 0 {
		t.Fatalf("%d objects outlived their definition (%v)", len(kvs), err)
	}
	// kubectl's discovery cache may still name the resource: then the
	// server answers its list with 404, as kube-apiserver does; api-resources
	// reads discovery afresh.
	eventually(t, 20*time.Second, "the resource type to go", func() (bool, string) {
		_, errs, code := k.run("get", "crontabs", "-A")
		gone := strings.Contains(errs, `the server doesn't have a resource type "crontabs"`) ||
			strings.Contains(errs, "the server could not find the requested resource")
		return code != 0 && gone, errs
	})
	if out := k.must("api-resources", "--api-group=stable.example.com", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("api-resources after the delete: %q", out)
	}

	// cert-manager's Certificate, from its published definition.
	k.must("apply", "-f", filepath.Join(repoRoot, "services/crd/testdata/cert-manager/certificates.yaml"))
	k.must("wait", "--for", "condition=established", "--timeout=60s", "crd/certificates.cert-manager.io")
	const cert = `apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: web, namespace: tabs}
spec:
  secretName: web-tls
  dnsNames: [web.example.com]
  issuerRef: {name: letsencrypt, kind: ClusterIssuer}
`
	if out := k.mustIn(cert, "apply", "-f", "-"); !strings.Contains(out, "certificate.cert-manager.io/web created") {
		t.Fatalf("a Certificate: %q", out)
	}
	if _, errs, code := k.runIn(strings.Replace(cert, "  secretName: web-tls\n", "", 1), "apply", "-f", "-"); code == 0 ||
		!strings.Contains(errs, "spec.secretName: Required value") {
		t.Fatalf("a Certificate without secretName: exit %d %q", code, errs)
	}
	if out := k.must("get", "certs", "-n", "tabs"); !regexpLine(out, "NAME", "READY", "SECRET", "AGE") || !regexpLine(out, "web", "web-tls") {
		t.Fatalf("get certs:\n%s", out)
	}
}

package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gcSetsYAML: ReplicaSets whose deletion the garbage collector cascades.
const gcSetsYAML = `apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: orphans}
spec:
  replicas: 2
  selector: {matchLabels: {set: orphans}}
  template:
    metadata: {labels: {set: orphans}}
    spec: {containers: [{name: web, image: nginx}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: front}
spec:
  replicas: 2
  selector: {matchLabels: {set: front}}
  template:
    metadata: {labels: {set: front}}
    spec: {containers: [{name: web, image: nginx}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: back}
spec:
  replicas: 1
  selector: {matchLabels: {set: back}}
  template:
    metadata: {labels: {set: back}}
    spec: {containers: [{name: web, image: nginx}]}
`

// TestKubectlCascadingDeletion: against `podflow up` (simulated nodes),
// the stock kubectl's three --cascade modes as kube-controller-manager's
// garbage collector gives them: orphan leaves the pods, without their
// ownerReference; foreground keeps the ReplicaSet, marked with
// deletionTimestamp and the foregroundDeletion finalizer, while a
// dependent blocking it (blockOwnerDeletion) is there, and deletes it
// once none is left; background deletes the pods after the set. A
// ConfigMap owned by a deleted custom resource, and one owned by a
// deleted ConfigMap, are collected; a custom resource deleted with
// --cascade=orphan leaves its dependent ConfigMap without the reference.
func TestKubectlCascadingDeletion(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t)
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	k.mustIn(gcSetsYAML, "apply", "-f", "-")
	running := func(set string, n int) {
		t.Helper()
		eventually(t, 60*time.Second, "set "+set+" running", func() (bool, string) {
			out, _, _ := k.run("get", "pods", "-l", "set="+set, "--field-selector", "status.phase=Running", "-o", "name")
			return len(strings.Fields(out)) == n, out
		})
	}
	running("orphans", 2)
	running("front", 2)
	running("back", 1)

	// --cascade=orphan: the set goes, its pods stay with no owner.
	k.must("delete", "rs", "orphans", "--cascade=orphan")
	eventually(t, 30*time.Second, "rs orphans gone", func() (bool, string) {
		out, errs, _ := k.run("get", "rs", "orphans")
		return strings.Contains(errs, "NotFound"), out + errs
	})
	refs := k.must("get", "pods", "-l", "set=orphans", "-o", "jsonpath={range .items[*]}{.metadata.name}:{.metadata.deletionTimestamp}:{.metadata.ownerReferences}{\"\\n\"}{end}")
	if lines := strings.Fields(refs); len(lines) != 2 {
		t.Fatalf("orphaned pods: %q", refs)
	}
	for _, l := range strings.Fields(refs) {
		if !strings.HasSuffix(l, "::") {
			t.Errorf("an orphaned pod is being deleted or keeps an owner: %s", l)
		}
	}

	// --cascade=foreground: a ConfigMap with a finalizer of its own and
	// blockOwnerDeletion holds the set back after its pods are gone.
	uid := k.must("get", "rs", "front", "-o", "jsonpath={.metadata.uid}")
	k.mustIn(`apiVersion: v1
kind: ConfigMap
metadata:
  name: front-holder
  finalizers: [example.com/hold]
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: front, uid: `+uid+`, blockOwnerDeletion: true}]
`, "apply", "-f", "-")
	k.must("delete", "rs", "front", "--cascade=foreground", "--wait=false")
	eventually(t, 60*time.Second, "the pods of front gone, front still there, marked", func() (bool, string) {
		pods, _, _ := k.run("get", "pods", "-l", "set=front", "-o", "name")
		rs, errs, code := k.run("get", "rs", "front", "-o", "jsonpath={.metadata.deletionTimestamp} {.metadata.finalizers}")
		switch marked := strings.Contains(rs, "foregroundDeletion") && !strings.HasPrefix(rs, " "); {
		case strings.Contains(errs, "NotFound") || code == 0 && !marked:
			t.Fatalf("rs front while its dependents go: %q %s", rs, errs)
		case code != 0:
			return false, errs
		}
		return strings.TrimSpace(pods) == "", pods + rs
	})
	if holder := k.must("get", "configmap", "front-holder", "-o", "jsonpath={.metadata.deletionTimestamp}"); holder == "" {
		t.Fatal("the holding ConfigMap was not deleted")
	}
	k.must("patch", "configmap", "front-holder", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	eventually(t, 30*time.Second, "rs front gone", func() (bool, string) {
		out, errs, _ := k.run("get", "rs", "front")
		return strings.Contains(errs, "NotFound"), out + errs
	})

	// --cascade=background (kubectl's default): the set goes at once, its
	// pods after it.
	k.must("delete", "rs", "back")
	eventually(t, 60*time.Second, "the pods of back gone", func() (bool, string) {
		out, _, _ := k.run("get", "pods", "-l", "set=back", "-o", "name")
		return strings.TrimSpace(out) == "", out
	})

	// Owners of other kinds: a custom resource and a ConfigMap.
	k.must("apply", "-f", filepath.Join(repoRoot, "services/crd/testdata/crontabs.yaml"))
	k.must("wait", "--for", "condition=established", "--timeout=60s", "crd/crontabs.stable.example.com")
	k.mustIn(`apiVersion: stable.example.com/v1
kind: CronTab
metadata: {name: owner}
spec: {cronSpec: "0 3 * * *", image: backup}
---
apiVersion: stable.example.com/v1
kind: CronTab
metadata: {name: keeper}
spec: {cronSpec: "0 4 * * *", image: backup}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: parent}
`, "apply", "-f", "-")
	owned := func(name, apiVersion, kind, owner string) {
		t.Helper()
		res := strings.ToLower(kind)
		if kind == "CronTab" {
			res = "crontabs.stable.example.com"
		}
		uid := k.must("get", res, owner, "-o", "jsonpath={.metadata.uid}")
		k.mustIn(`apiVersion: v1
kind: ConfigMap
metadata:
  name: `+name+`
  ownerReferences: [{apiVersion: `+apiVersion+`, kind: `+kind+`, name: `+owner+`, uid: `+uid+`}]
`, "apply", "-f", "-")
	}
	owned("of-crontab", "stable.example.com/v1", "CronTab", "owner")
	owned("of-configmap", "v1", "ConfigMap", "parent")
	owned("of-keeper", "stable.example.com/v1", "CronTab", "keeper")
	k.must("delete", "crontab", "owner")
	k.must("delete", "configmap", "parent")
	k.must("delete", "crontab", "keeper", "--cascade=orphan")
	eventually(t, 60*time.Second, "the dependents of the deleted owners gone", func() (bool, string) {
		out, _, _ := k.run("get", "configmaps", "of-crontab", "of-configmap", "--ignore-not-found", "-o", "name")
		return strings.TrimSpace(out) == "", out
	})
	eventually(t, 30*time.Second, "keeper gone, of-keeper orphaned", func() (bool, string) {
		_, errs, _ := k.run("get", "crontab", "keeper")
		refs, _, _ := k.run("get", "configmap", "of-keeper", "-o", "jsonpath={.metadata.name}:{.metadata.ownerReferences}")
		return strings.Contains(errs, "NotFound") && refs == "of-keeper:", errs + refs
	})
}

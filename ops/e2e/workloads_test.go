package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const replicaSetYAML = `apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
---
apiVersion: v1
kind: ReplicationController
metadata:
  name: legacy
spec:
  replicas: 2
  selector: {app: legacy}
  template:
    metadata:
      labels: {app: legacy}
    spec:
      containers:
      - name: web
        image: nginx
`

// TestKubectlReplicaSet: against `podflow up`, the stock kubectl creates
// a ReplicaSet and a ReplicationController, whose controller stages make
// their pods through the pipeline until the status shows them ready, and
// `kubectl scale` (the scale subresource) scales them down and up.
func TestKubectlReplicaSet(t *testing.T) {
	c := startCluster(t)
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	manifest := filepath.Join(t.TempDir(), "sets.yaml")
	if err := os.WriteFile(manifest, []byte(replicaSetYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	out := k.must("create", "-f", manifest)
	if !strings.Contains(out, "replicaset.apps/web created") || !strings.Contains(out, "replicationcontroller/legacy created") {
		t.Fatalf("create: %q", out)
	}
	ready := func(kind, name, n, selector string) {
		t.Helper()
		eventually(t, 60*time.Second, kind+" "+name+" ready with "+n+" pods", func() (bool, string) {
			st, _, _ := k.run("get", kind, name, "-o", "jsonpath={.status.replicas}/{.status.readyReplicas}/{.status.availableReplicas}")
			pods, _, _ := k.run("get", "pods", "-l", selector, "--field-selector", "status.phase=Running", "-o", "name")
			running := len(strings.Fields(pods))
			return st == n+"/"+n+"/"+n && strconv.Itoa(running) == n, st + " running " + strconv.Itoa(running) + "\n" + pods
		})
	}
	ready("rs", "web", "3", "app=web")
	ready("rc", "legacy", "2", "app=legacy")

	if out := k.must("scale", "rs", "web", "--replicas=1"); !strings.Contains(out, "replicaset.apps/web scaled") {
		t.Fatalf("scale: %q", out)
	}
	ready("rs", "web", "1", "app=web")
	k.must("scale", "rc", "legacy", "--replicas=3")
	ready("rc", "legacy", "3", "app=legacy")

	// Every pod is owned by its set, through the controller reference.
	owners := k.must("get", "pods", "-o", "jsonpath={range .items[*]}{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {end}")
	if n := strings.Count(owners, "ReplicaSet/web"); n != 1 {
		t.Errorf("%d pods owned by ReplicaSet/web, want 1: %s", n, owners)
	}
	if n := strings.Count(owners, "ReplicationController/legacy"); n != 3 {
		t.Errorf("%d pods owned by ReplicationController/legacy, want 3: %s", n, owners)
	}
}

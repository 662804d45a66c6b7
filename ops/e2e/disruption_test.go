package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const budgetYAML = `apiVersion: apps/v1
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
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: nginx
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
spec:
  minAvailable: 2
  selector:
    matchLabels: {app: web}
`

// TestKubectlDrainRespectsBudget: against `podflow up` with one simulated
// node, the disruption controller stage computes a PodDisruptionBudget's
// status over a ReplicaSet's pods; the stock `kubectl drain` evicts
// through pods/eviction the one pod the budget allows, is refused the
// others with kube's 429 until its --timeout, and drains the node once
// the budget allows it.
func TestKubectlDrainRespectsBudget(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t, "--nodes", "1")
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	manifest := filepath.Join(t.TempDir(), "budget.yaml")
	if err := os.WriteFile(manifest, []byte(budgetYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	k.must("create", "-f", manifest)
	node := strings.TrimPrefix(strings.TrimSpace(k.must("get", "nodes", "-o", "name")), "node/")
	status := func(want string) {
		t.Helper()
		eventually(t, 60*time.Second, "budget status "+want, func() (bool, string) {
			got, _, _ := k.run("get", "pdb", "web", "-o",
				"jsonpath={.status.expectedPods}/{.status.desiredHealthy}/{.status.currentHealthy}/{.status.disruptionsAllowed}/{.status.observedGeneration}")
			return got == want, got
		})
	}
	status("3/2/3/1/1") // expected/desired/current/allowed/observedGeneration

	// The budget allows one eviction: drain evicts one pod, is refused
	// the others (the replacement cannot run on the cordoned node), and
	// gives up at its timeout.
	out, errOut, code := k.run("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=12s")
	if code == 0 {
		t.Fatalf("drain succeeded although the budget allows one eviction:\n%s\n%s", out, errOut)
	}
	if !strings.Contains(errOut, "Cannot evict pod as it would violate the pod's disruption budget.") {
		t.Fatalf("drain's refusals do not carry kube's message:\n%s\n%s", out, errOut)
	}
	if n := strings.Count(out, " evicted"); n != 1 {
		t.Fatalf("%d pods evicted, want 1:\n%s\n%s", n, out, errOut)
	}
	status("3/2/2/0/1")
	if got := k.must("get", "pdb", "web", "-o", "jsonpath={.status.conditions[0].type}={.status.conditions[0].status}/{.status.conditions[0].reason}"); got != "DisruptionAllowed=False/InsufficientPods" {
		t.Errorf("condition %q", got)
	}

	// A budget that allows every disruption: the node drains.
	k.must("patch", "pdb", "web", "--type", "merge", "-p", `{"spec":{"minAvailable":0}}`)
	status("3/0/2/2/2")
	out, errOut, code = k.run("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s")
	if code != 0 || !strings.Contains(out, "node/"+node+" drained") {
		t.Fatalf("drain with a budget allowing it: exit %d\n%s\n%s", code, out, errOut)
	}
	running, _, _ := k.run("get", "pods", "-l", "app=web", "--field-selector", "spec.nodeName="+node, "-o", "name")
	if strings.TrimSpace(running) != "" {
		t.Fatalf("pods left on the drained node: %s", running)
	}
}

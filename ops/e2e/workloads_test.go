package e2e

import (
	"os"
	"path/filepath"
	"slices"
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
	parallel(t, simulated)
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

const indexedJobYAML = `apiVersion: batch/v1
kind: Job
metadata:
  name: indexed
spec:
  completions: 5
  parallelism: 2
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: ["sh", "-c", "echo $JOB_COMPLETION_INDEX"]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: failing
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: ["sh", "-c", "exit 3"]
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
spec:
  schedule: "0 3 * * *"
  timeZone: Europe/Paris
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: work
            image: busybox
            command: ["echo", "backup"]
`

// TestKubectlJob: against `podflow up`, the stock kubectl creates Jobs
// the Job controller stage runs to the end: `kubectl create job` and
// `kubectl wait --for=condition=complete`, an Indexed Job (completedIndexes
// 0-4), a failing Job that `kubectl wait --for=condition=failed` sees stop
// at its backoffLimit, and `kubectl create job --from=cronjob/...`.
func TestKubectlJob(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t)
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	if out := k.must("create", "job", "hello", "--image=busybox", "--", "echo", "done"); !strings.Contains(out, "job.batch/hello created") {
		t.Fatalf("create job: %q", out)
	}
	manifest := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(manifest, []byte(indexedJobYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	k.must("create", "-f", manifest)
	if out := k.must("wait", "--for=condition=complete", "job/hello", "job/indexed", "--timeout=120s"); !strings.Contains(out, "job.batch/hello condition met") {
		t.Fatalf("wait complete: %q", out)
	}
	// kube omits zero counts (omitempty).
	if st := k.must("get", "job", "hello", "-o", "jsonpath={.status.succeeded}/{.status.failed}/{.status.active}"); st != "1//" {
		t.Errorf("hello status %q, want 1//", st)
	}
	if st := k.must("get", "job", "indexed", "-o", "jsonpath={.status.succeeded}/{.status.completedIndexes}"); st != "5/0-4" {
		t.Errorf("indexed status %q, want 5/0-4", st)
	}
	// Each pod printed its JOB_COMPLETION_INDEX.
	logs := strings.Fields(k.must("logs", "-l", "batch.kubernetes.io/job-name=indexed"))
	slices.Sort(logs)
	if !slices.Equal(logs, []string{"0", "1", "2", "3", "4"}) {
		t.Errorf("the indexed pods printed %q, want their five indexes", logs)
	}
	k.must("wait", "--for=condition=failed", "job/failing", "--timeout=120s")
	reason := k.must("get", "job", "failing", "-o", `jsonpath={.status.conditions[?(@.type=="Failed")].reason}/{.status.failed}`)
	if reason != "BackoffLimitExceeded/2" {
		t.Errorf("failing Job: %q, want BackoffLimitExceeded/2", reason)
	}
	k.must("create", "job", "manual", "--from=cronjob/nightly")
	k.must("wait", "--for=condition=complete", "job/manual", "--timeout=120s")
}

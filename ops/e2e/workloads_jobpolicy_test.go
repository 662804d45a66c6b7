package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const jobPolicyYAML = `apiVersion: batch/v1
kind: Job
metadata:
  name: failjob
spec:
  backoffLimit: 6
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes: {operator: In, values: [42]}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: ["sh", "-c", "exit 42"]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: early
spec:
  completions: 5
  parallelism: 2
  completionMode: Indexed
  successPolicy:
    rules:
    - succeededIndexes: "0"
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: ["sh", "-c", "if test \"$JOB_COMPLETION_INDEX\" = 0; then exit 0; fi; sleep 3600"]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: shortlived
spec:
  ttlSecondsAfterFinished: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: ["echo", "done"]
`

// TestKubectlJobPolicies: against `podflow up`, the stock kubectl sees a
// Job whose pod exits 42 fail at once through its podFailurePolicy
// (reason PodFailurePolicy, one failure, not backoffLimit's seven), an
// Indexed Job complete through its successPolicy once index 0 succeeded
// while the other indexes still ran, and a Job with
// ttlSecondsAfterFinished 1 deleted after it completed, its pods with it
// (the ttlafterfinished and garbagecollector stages).
func TestKubectlJobPolicies(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t)
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	manifest := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(manifest, []byte(jobPolicyYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	k.must("create", "-f", manifest)

	k.must("wait", "--for=condition=failed", "job/failjob", "--timeout=120s")
	got := k.must("get", "job", "failjob", "-o", `jsonpath={.status.conditions[?(@.type=="Failed")].reason}/{.status.failed}`)
	if got != "PodFailurePolicy/1" {
		t.Errorf("failjob: %q, want PodFailurePolicy/1", got)
	}
	msg := k.must("get", "job", "failjob", "-o", `jsonpath={.status.conditions[?(@.type=="Failed")].message}`)
	if !strings.HasPrefix(msg, "Container work for pod ") || !strings.HasSuffix(msg, " failed with exit code 42 matching FailJob rule at index 0") {
		t.Errorf("failjob message %q", msg)
	}

	k.must("wait", "--for=condition=complete", "job/early", "--timeout=120s")
	got = k.must("get", "job", "early", "-o",
		`jsonpath={.status.conditions[?(@.type=="Complete")].reason}/{.status.completedIndexes}/{.status.succeeded}/{.status.active}`)
	if got != "SuccessPolicy/0/1/" {
		t.Errorf("early: %q, want SuccessPolicy/0/1/ (reason, completedIndexes, succeeded, no active)", got)
	}

	k.must("wait", "--for=delete", "job/shortlived", "--timeout=120s")
	deadline := time.Now().Add(60 * time.Second)
	for {
		pods := k.must("get", "pods", "-l", "batch.kubernetes.io/job-name=shortlived", "-o", "name")
		if strings.TrimSpace(pods) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pods of the deleted Job shortlived remain: %q", pods)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

package e2e

import (
	"strings"
	"testing"
	"time"
)

// chaosScenario runs `podflow chaos --scenario` against a fresh system
// with two replicas of each attacked controller stage and wants every
// invariant held and each stage's replicas killed during the workload.
func chaosScenario(t *testing.T, stages []string, args ...string) {
	t.Helper()
	var replicas []string
	for _, s := range stages {
		replicas = append(replicas, s+"=2")
	}
	c := startCluster(t, "--nodes", "10", "--replicas", strings.Join(replicas, ","))
	all := append([]string{"chaos", "--config", c.config, "--kill-interval", "1s", "--max-kills", "3", "--duration", "30s", "--settle", "3m"}, args...)
	out, code := c.podflowTimeout(6*time.Minute, all...)
	t.Log(out)
	if code != 0 || !strings.Contains(out, "0 violations") {
		t.Fatalf("chaos exit %d", code)
	}
	for _, s := range stages {
		if !strings.Contains(out, "SIGKILL "+s+"-") {
			t.Errorf("no replica of %s was killed", s)
		}
	}
}

// TestChaosRollout: issue #36's chaos, bounded: a Deployment rolled out
// and scaled from 20 to 200 replicas while replicas of the deployment and
// replicaset controllers are SIGKILLed; its ReplicaSets never ask for
// more than replicas + maxSurge, none has a pod created twice, the
// rollout finishes and leaves no orphan (checkRollout, checkOwners; their
// unit tests attack them with broken histories).
func TestChaosRollout(t *testing.T) {
	parallel(t, simulated)
	chaosScenario(t, []string{"deployment", "replicaset"}, "--scenario", "rollout", "--scale-to", "200", "--seed", "36")
}

// TestChaosJob: issue #37's chaos, bounded: an Indexed Job of 100
// completions while replicas of the job controller are SIGKILLed; each
// index is counted once, the Job ends Complete with 100 and no pod keeps
// the tracking finalizer (checkJob, checkFinalizers).
func TestChaosJob(t *testing.T) {
	parallel(t, simulated)
	chaosScenario(t, []string{"job"}, "--scenario", "job", "--completions", "100", "--parallelism", "20", "--indexed", "--seed", "37")
}

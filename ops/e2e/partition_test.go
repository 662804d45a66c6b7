package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestPartitionedLeader is issue 22's bounded partition run in `make
// test` (`make chaos-partition`): podflow chaos starts its own --cluster
// system with every raft link between the store replicas and every route
// between the NATS servers through its relays; under a 200-pod workload
// and concurrent HTTPS clients on ConfigMaps it cuts the store leader off
// from its followers (a minority of one that still serves its clients over
// NATS), then a NATS server off from the other two, each twice, healing
// after each; then it checks the pod invariants (every acknowledged pod
// Running, none lost, persisted or bound twice, no IP twice), that the
// replicas agree by content, that no durable consumer holds an event, that
// the watchers restarted at every heal saw every change once and in order,
// that no connection went around the relays, and that the ConfigMap
// history is linearizable (porcupine). `make chaos` runs the whole matrix
// of nemeses.
func TestPartitionedLeader(t *testing.T) {
	parallel(t, heavyLoad)
	runChaosRun(t, []string{"--nemesis", "leader,partition", "--nemesis-target", "store,nats", "--targets", "stages,nats",
		"--pods", "200", "--duration", "30s", "--kill-interval", "6s", "--fault-for", "5s", "--nodes", "10", "--settle", "60s", "--seed", "200"},
		"isolate store-", "(the leader) for 5s", "healed (store leader before the heal", "partition [nats-", "healed (events stream leader",
		"check: every acknowledged pod settled: 200 Running and Ready", "check: 200/200 pods stored",
		"check: every NATS route connection runs through a relay (no direct route)")
}

// chaosChecks are what every bounded chaos run must print.
var chaosChecks = []string{"ConfigMap operations over HTTPS are linearizable",
	"check: store replicas agree by content", "no acknowledged PodRequested lost", "no event unacknowledged or undelivered in any durable consumer",
	"in order, once, with no gap, against the final list and the store's history",
	"check: every raft connection runs through a relay (no direct route)",
	"check: the watcher (store client) saw", "check: the watcher (HTTPS API) saw"}

// runChaosRun runs `podflow chaos` with args and fails unless it found no
// violation and printed chaosChecks and want.
func runChaosRun(t *testing.T, args []string, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"chaos", "--own"}, args...)...)
	cmd.Dir = repoRoot
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Log(out)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if err != nil || !strings.Contains(out, "0 violations") {
		logCrashedTails(t, out)
		t.Fatalf("chaos: %v", err)
	}
	for _, w := range append(want, chaosChecks...) {
		if !strings.Contains(out, w) {
			t.Errorf("no %q in the chaos run", w)
		}
	}
}

// TestPartitionedNATSServer is the bounded NATS-route run of `make test`:
// podflow chaos starts its own --cluster system with every route between
// the 3 NATS servers through its relays (each server advertising an
// address that refuses, so that no route learnt by gossip goes around
// them), cuts the events stream's leader off from the other two servers
// (it still serves its clients), cuts a random server off, cuts one off
// again and SIGKILLs a NATS server of the majority side in the middle of
// the cut (cutkill: Jepsen's NATS case), bridges, slows and flaps the
// routes, healing after each, under a small pod workload and the HTTPS
// ConfigMap clients; then the same checkers as TestPartitionedLeader (no
// acknowledged PodRequested lost, consumers drained, replicas agreeing,
// watches, linearizability) and that no route bypassed the relays.
func TestPartitionedNATSServer(t *testing.T) {
	parallel(t, heavyLoad)
	runChaosRun(t, []string{"--nemesis", "leader,partition,cutkill,bridge,latency,flap", "--nemesis-target", "nats", "--targets", "nats,stages",
		"--pods", "40", "--duration", "34s", "--kill-interval", "4s", "--fault-for", "4s", "--nodes", "5", "--settle", "60s", "--seed", "43"},
		// The faults come one after another (each begins once the last has
		// healed), so how many fit in the duration depends on the machine:
		// the first four always do; latency and flap usually follow.
		"isolate nats-", "(the leader) for 4s", "partition [nats-", "healed (events stream leader", "during the cut",
		"bridge nats-", "NATS route bytes relayed per link: nats-1→nats-2",
		"check: every NATS route connection runs through a relay (no direct route)")
}

// crashedLog matches the supervisor's line naming a process that exited
// and its log file.
var crashedLog = regexp.MustCompile(`exited with code \d+; restarting \(log: ([^)]+\.log)\)`)

// logCrashedTails logs the last lines of the log of every process the
// run's supervisor saw exit, before the test's temporary directory (where
// they are) is removed: a crash's cause is in its own log.
func logCrashedTails(t *testing.T, out string) {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range crashedLog.FindAllStringSubmatch(out, -1) {
		if seen[m[1]] {
			continue
		}
		seen[m[1]] = true
		b, err := os.ReadFile(m[1])
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		t.Logf("last lines of %s:\n%s", m[1], strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}

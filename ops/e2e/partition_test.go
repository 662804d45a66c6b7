package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPartitionedLeader is the bounded network-fault run of `make test`:
// podflow chaos starts its own system with every raft link between the
// store replicas through its relays, cuts the store leader off from its
// followers (it still serves its clients over NATS) and heals, twice,
// under a small pod workload and concurrent HTTPS clients on ConfigMaps;
// then it checks the pod invariants (no acknowledged PodRequested lost,
// none persisted or bound twice), that the replicas agree by content,
// that no durable consumer holds an event, that a watcher restarted at
// every heal saw every change once and in order, and that the ConfigMap
// history is linearizable (porcupine). `make chaos` runs
// the whole matrix of nemeses.
func TestPartitionedLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "chaos", "--nemesis", "leader", "--pods", "30", "--duration", "12s",
		"--kill-interval", "5s", "--fault-for", "4s", "--nodes", "5", "--settle", "60s", "--seed", "22")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Log(out)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if err != nil || !strings.Contains(out, "0 violations") {
		t.Fatalf("chaos: %v", err)
	}
	for _, want := range []string{"(the leader) for 4s", "healed", "ConfigMap operations over HTTPS are linearizable",
		"check: store replicas agree by content", "no acknowledged PodRequested lost", "no event unacknowledged or undelivered in any durable consumer",
		"in order, once, with no gap, against the final list and the store's history"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the chaos run", want)
		}
	}
}

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchPipelineCost: `podflow bench pipeline` on a tiny run reports
// counts the system made itself, non-zero and consistent with each other:
// every pod's events are stored messages, every stage acknowledged its
// input for every pod, the store wrote at least the create and the bind of
// every pod into its raft log, and every process podflow runs has CPU time.
func TestBenchPipelineCost(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t, "--nodes", "2")
	const pods = 20
	file := filepath.Join(t.TempDir(), "cost.json")
	out, code := c.podflowTimeout(3*time.Minute, "bench", "pipeline", "--config", c.config,
		"--pods", "20", "--rate", "50", "--cost-json", file)
	if code != 0 {
		t.Fatalf("bench pipeline: exit %d\n%s", code, out)
	}
	t.Log(out)
	if !strings.Contains(out, "memory (resident set") {
		t.Errorf("bench pipeline printed no memory table")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Pods            int  `json:"pods"`
		Quiesced        bool `json:"quiesced"`
		MinEventsPerPod int  `json:"minEventsPerPod"`
		Processes       []struct {
			Name  string  `json:"name"`
			Role  string  `json:"role"`
			PID   int     `json:"pid"`
			CPUms float64 `json:"cpuMs"`
			RSS   uint64  `json:"rssAfter"`
			Peak  uint64  `json:"peakRss"`
		} `json:"processes"`
		TotalCPU   float64 `json:"totalCpuMs"`
		Messages   uint64  `json:"messages"`
		Deliveries uint64  `json:"deliveries"`
		Acks       uint64  `json:"acks"`
		LogEntries uint64  `json:"logEntries"`
		Store      struct {
			WriteRequests, ReadRequests, StaleReadRequests, WatchRequests uint64
			WatchEventsSent, LogAppends, LogEntriesWritten                uint64
		} `json:"store"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	check := func(ok bool, format string, args ...any) {
		t.Helper()
		if !ok {
			t.Errorf(format, args...)
		}
	}
	check(r.Pods == pods && r.Quiesced, "pods %d (want %d), quiesced %v", r.Pods, pods, r.Quiesced)
	// PodRequested, PodAuthorized, PodAdmitted, PodPersisted, PodScheduled
	// and PodRunning at least.
	check(r.MinEventsPerPod >= 6, "the fewest event types of one pod: %d, want ≥ 6", r.MinEventsPerPod)
	check(r.Messages >= uint64(pods*r.MinEventsPerPod), "%d messages stored for %d pods of ≥ %d events each", r.Messages, pods, r.MinEventsPerPod)
	// api, admission, persistence, scheduler and the node each ack their
	// input event of every pod.
	check(r.Acks >= 5*pods && r.Deliveries >= r.Acks, "%d deliveries, %d acks for %d pods (want acks ≥ 5 per pod, deliveries ≥ acks)", r.Deliveries, r.Acks, pods)
	// Persistence creates each pod and the scheduler binds it.
	check(r.Store.WriteRequests >= 2*pods && r.LogEntries >= 2*pods, "%d store writes, %d raft log entries for %d pods (want ≥ 2 per pod)", r.Store.WriteRequests, r.LogEntries, pods)
	check(r.Store.LogEntriesWritten >= r.LogEntries && r.Store.LogAppends > 0, "%d entries written by all replicas in %d appends, the log grew %d", r.Store.LogEntriesWritten, r.Store.LogAppends, r.LogEntries)
	check(r.Store.WatchEventsSent >= pods, "%d watch events delivered for %d pods", r.Store.WatchEventsSent, pods)
	roles := map[string]int{}
	for _, p := range r.Processes {
		check(p.PID > 0 && p.CPUms >= 0, "process %s: pid %d, %v ms", p.Name, p.PID, p.CPUms)
		check(p.RSS > 0 && p.Peak >= p.RSS, "process %s: resident set %d bytes, peak %d", p.Name, p.RSS, p.Peak)
		roles[p.Role]++
	}
	check(roles["store"] == 3 && roles["nats"] >= 1 && len(r.Processes) >= 10, "processes by role %v", roles)
	check(r.TotalCPU > 0, "total CPU %v ms", r.TotalCPU)
}

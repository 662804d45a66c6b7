package e2e

import (
	"encoding/json"
	"fmt"
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
// Its --slo pass then creates, watches and deletes pods with client-go
// through the HTTPS API and reports every call and every pod's startup.
func TestBenchPipelineCost(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t, "--nodes", "2")
	const pods, sloPods = 20, 15
	file := filepath.Join(t.TempDir(), "cost.json")
	sloFile := filepath.Join(t.TempDir(), "slo.json")
	out, code := c.podflowTimeout(3*time.Minute, "bench", "pipeline", "--config", c.config,
		"--pods", "20", "--rate", "50", "--cost-json", file,
		"--slo", "--slo-pods", fmt.Sprint(sloPods), "--slo-rate", "30", "--slo-json", sloFile)
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

	b, err = os.ReadFile(sloFile)
	if err != nil {
		t.Fatal(err)
	}
	type summary struct {
		N                   int
		P50ms, P99ms, MaxMs float64
		Errors, Missing     int
	}
	var slo struct {
		Pods                    int
		Rate                    int
		Create, Delete, Startup summary
	}
	if err := json.Unmarshal(b, &slo); err != nil {
		t.Fatal(err)
	}
	check(slo.Pods == sloPods && slo.Rate == 30, "slo pass: %d pods at %d/s, want %d at 30/s", slo.Pods, slo.Rate, sloPods)
	for what, s := range map[string]summary{"create": slo.Create, "delete": slo.Delete, "startup": slo.Startup} {
		check(s.N == sloPods && s.Errors == 0 && s.Missing == 0, "slo %s: %d measured, %d errors, %d never Running; want %d, 0, 0", what, s.N, s.Errors, s.Missing, sloPods)
		check(0 < s.P50ms && s.P50ms <= s.P99ms && s.P99ms <= s.MaxMs, "slo %s: p50 %v ms, p99 %v, max %v", what, s.P50ms, s.P99ms, s.MaxMs)
	}
	for _, key := range []string{"POST pods (create)", "DELETE pods", "pod startup: created → Running (watched)"} {
		check(strings.Contains(out, key), "bench pipeline --slo printed no %q line", key)
	}
}

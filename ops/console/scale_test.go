package console

import (
	"fmt"
	"testing"
	"time"
)

// bigSnapshot is a system of n pods on 100 nodes, the first stuck.
func bigSnapshot(n int, at time.Time) *Snapshot {
	s := &Snapshot{Time: at}
	for _, st := range []string{"api", "admission", "persistence", "scheduler", "nodeagent (sim)", "status", "endpoints"} {
		s.Stages = append(s.Stages, Stage{Name: st, Consumer: st, Replicas: 1, Peers: []Peer{{Name: st + "-1", Handled: 20000}}})
	}
	for i := range 100 {
		s.Nodes = append(s.Nodes, Node{Name: fmt.Sprintf("sim-node-%04d", i+1), Ready: "Ready", CPU: "0 / 8", Memory: "0 / 32Gi", Pods: n / 100, MaxPods: "110",
			HeartbeatSec: int64(at.Second() % 10), Heartbeat: at.Unix() - int64(at.Second()%10)})
	}
	for i := range n {
		p := Pod{Namespace: fmt.Sprintf("ns-%d", i%20), Name: fmt.Sprintf("pod-%05d", i), Phase: "Running", Stage: "endpoints",
			Verdict: "Running and Ready", Node: fmt.Sprintf("sim-node-%04d", i%100+1), Ready: true, Created: at.Unix() - 600, AgeSec: 600 + int64(at.Second())}
		if i == 0 {
			p.Phase, p.Stage, p.Reason, p.Stuck, p.Ready, p.Node = "Pending", "scheduler", "FailedScheduling", true, false, ""
		}
		s.Pods = append(s.Pods, p)
	}
	return s
}

// TestIdleEventsAt20000Pods: with 20,000 pods and nothing changing, what
// the hub sends a viewer per poll (at most one a second) stays under 20
// KB: no pods, only what changed. Measured in bytes.
func TestIdleEventsAt20000Pods(t *testing.T) {
	h := NewHub(nil, time.Second)
	ch, cancel := h.Subscribe()
	defer cancel()
	t0 := time.Unix(1_800_000_000, 0)
	h.publish(bigSnapshot(20000, t0), t0)
	first := <-ch
	if len(first) > 200<<10 {
		t.Errorf("the first snapshot is %d bytes", len(first))
	}
	const polls = 10
	total := 0
	for i := 1; i <= polls; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		snap := bigSnapshot(20000, at)
		h.publish(snap, at)
		b := <-ch
		total += len(b)
	}
	if per := total / polls; per >= 20<<10 {
		t.Fatalf("%d bytes a poll with nothing changing, want under 20 KB", per)
	} else {
		t.Logf("%d bytes a poll with 20,000 pods and nothing changing (the first snapshot: %d)", per, len(first))
	}
}

// TestPodsSearchAmong20000: one pod is found among 20,000 by a part of its
// name, the filters select exactly, and pages are bounded.
func TestPodsSearchAmong20000(t *testing.T) {
	h := NewHub(nil, time.Second)
	at := time.Unix(1_800_000_000, 0)
	h.publish(bigSnapshot(20000, at), at)
	if p := h.Pods(PodQuery{Q: "pod-12345"}); p.Total != 1 || p.Pods[0].Namespace != "ns-5" {
		t.Fatalf("search: %+v", p)
	}
	if p := h.Pods(PodQuery{Namespace: "ns-3", Limit: 50}); p.Total != 1000 || len(p.Pods) != 50 {
		t.Fatalf("namespace ns-3: %d in all, %d on the page", p.Total, len(p.Pods))
	}
	if p := h.Pods(PodQuery{Stage: "scheduler", Stuck: true}); p.Total != 1 || p.Pods[0].Reason != "FailedScheduling" {
		t.Fatalf("stuck in the scheduler: %+v", p)
	}
	if p := h.Pods(PodQuery{Node: "sim-node-0007", Offset: 190, Limit: 100}); p.Total != 200 || len(p.Pods) != 10 || p.Offset != 190 {
		t.Fatalf("node page: total %d, %d rows", p.Total, len(p.Pods))
	}
	if p := h.Pods(PodQuery{Limit: 100000}); len(p.Pods) != 100 {
		t.Fatalf("an unbounded page: %d rows", len(p.Pods))
	}
}

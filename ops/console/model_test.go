package console

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
)

func pod(name, node, phase string, created time.Time, conds ...*corev1.PodCondition) *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: timestamppb.New(created)},
		Spec: &corev1.PodSpec{NodeName: node, Containers: []*corev1.Container{{Name: "c", Resources: &corev1.ResourceRequirements{
			Requests: map[string]string{"cpu": "500m", "memory": "256Mi"}}}}},
		Status: &corev1.PodStatus{Phase: phase, Conditions: conds},
	}
}

func TestBuildPods(t *testing.T) {
	now := time.Now()
	ready := &corev1.PodCondition{Type: "Ready", Status: "True"}
	unsched := &corev1.PodCondition{Type: "PodScheduled", Status: "False", Reason: "Unschedulable"}
	stored := []*corev1.Pod{
		pod("a-running", "n1", "Running", now.Add(-time.Minute), ready),
		pod("b-unschedulable", "", "Pending", now.Add(-30*time.Second), unsched),
		pod("c-fresh", "", "Pending", now.Add(-time.Second)),
	}
	seen := map[string]where{
		"default/a-running":       {Stage: "endpoints", Verdict: "Running and Ready", At: now.Add(-50 * time.Second)},
		"default/b-unschedulable": {Stage: "scheduler", Verdict: "Pending: FailedScheduling: 0/3 nodes are available", At: now.Add(-time.Second)},
		"default/c-fresh":         {Stage: "scheduler", Verdict: "stored (Pending); waiting for a node", At: now.Add(-time.Second)},
		"default/d-admission":     {Stage: "admission", Verdict: "authorized; waiting for admission", At: now},
		"default/e-rejected":      {Stage: "admission", Verdict: "rejected by admission: 422 Invalid: bad", At: now.Add(-time.Minute)},
	}
	got := buildPods(stored, seen, now)
	var order []string
	for _, p := range got {
		order = append(order, p.Name)
	}
	if want := "e-rejected b-unschedulable a-running c-fresh d-admission"; strings.Join(order, " ") != want {
		t.Fatalf("order %v, want %s", order, want)
	}
	for _, tc := range []struct {
		name, stage, reason string
		stuck               bool
	}{
		{"a-running", "endpoints", "", false},
		{"b-unschedulable", "scheduler", "FailedScheduling", true},
		{"c-fresh", "scheduler", "", false},
		{"d-admission", "admission", "", false},
		{"e-rejected", "admission", "Rejected", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range got {
				if p.Name == tc.name {
					if p.Stage != tc.stage || p.Reason != tc.reason || p.Stuck != tc.stuck {
						t.Fatalf("%+v, want stage %s reason %q stuck %v", p, tc.stage, tc.reason, tc.stuck)
					}
					return
				}
			}
			t.Fatal("missing")
		})
	}
}

func TestBuildNodes(t *testing.T) {
	now := time.Now()
	n := &corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n1"}, Spec: &corev1.NodeSpec{}, Status: &corev1.NodeStatus{
		Allocatable: map[string]string{"cpu": "2", "memory": "1Gi", "pods": "110"},
		Conditions:  []*corev1.NodeCondition{{Type: "Ready", Status: "True", LastHeartbeatTime: timestamppb.New(now.Add(-3 * time.Second))}},
	}}
	got := buildNodes([]*corev1.Node{n}, []*corev1.Pod{pod("a", "n1", "Running", now), pod("b", "n1", "Running", now), pod("c", "", "Pending", now)}, now)
	if len(got) != 1 {
		t.Fatal(got)
	}
	g := got[0]
	if g.Ready != "Ready" || g.Pods != 2 || g.CPU != "1 / 2" || g.CPUFrac != 0.5 || g.Memory != "512Mi / 1Gi" || g.HeartbeatSec != 3 || g.MaxPods != "110" {
		t.Fatalf("%+v", g)
	}
}

func TestStageConsumers(t *testing.T) {
	got := strings.Join(stageConsumers([]string{"status", "nodeagent-sim-n2", "nodeagent-sim-n1", "api"}), " ")
	if want := "api admission persistence scheduler nodeagent-sim-n1 nodeagent-sim-n2 status endpoints serviceaccount rootcacert replicaset replicationcontroller resourcequota nodelifecycle job cronjob deployment statefulset daemonset garbagecollector disruption ttlafterfinished"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}

func TestPercentiles(t *testing.T) {
	text := `# HELP podflow_stage_handle_duration_seconds x
podflow_stage_handle_duration_seconds_bucket{stage="scheduler",le="0.001"} 50
podflow_stage_handle_duration_seconds_bucket{stage="scheduler",le="0.01"} 98
podflow_stage_handle_duration_seconds_bucket{stage="scheduler",le="0.1"} 100
podflow_stage_handle_duration_seconds_bucket{stage="scheduler",le="+Inf"} 100
podflow_stage_events_total{stage="scheduler"} 7
`
	b := map[string]map[float64]float64{}
	parseHistogram(bufio.NewScanner(strings.NewReader(text)), "podflow_stage_handle_duration_seconds_bucket", b)
	for _, tc := range []struct {
		q, want float64
	}{{0.5, 0.001}, {0.99, 0.1}, {0.9, 0.01}} {
		if got := quantile(b["scheduler"], tc.q); got != tc.want {
			t.Errorf("q%v = %v, want %v", tc.q, got, tc.want)
		}
	}
	if quantile(map[float64]float64{}, 0.5) != 0 {
		t.Error("empty histogram")
	}
}

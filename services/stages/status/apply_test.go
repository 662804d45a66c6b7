package status

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
)

func boundPod() *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "default", Uid: "u"},
		Spec:     &corev1.PodSpec{NodeName: "n1"},
		Status: &corev1.PodStatus{Phase: "Pending", QosClass: "BestEffort", Conditions: []*corev1.PodCondition{
			{Type: "PodScheduled", Status: "True"},
		}},
	}
}

func report(seq int64, phase string) *eventsv1.PodStatusReport {
	return &eventsv1.PodStatusReport{Seq: seq, Status: &corev1.PodStatus{
		Phase: phase, PodIp: "10.244.1.5",
		Conditions: []*corev1.PodCondition{{Type: "Ready", Status: "True"}},
	}}
}

func TestApplyReport(t *testing.T) {
	p := boundPod()
	if !ApplyReport(p, "n1", report(5, "Running")) {
		t.Fatal("first report not applied")
	}
	if p.Status.Phase != "Running" || p.Status.PodIp != "10.244.1.5" || podrules.AppliedSeq(p) != 5 {
		t.Fatalf("status %v seq %d", p.Status, podrules.AppliedSeq(p))
	}
	if podrules.PodCondition(p.Status, "PodScheduled") == nil {
		t.Fatal("PodScheduled condition lost")
	}
	if p.Status.QosClass != "BestEffort" {
		t.Fatalf("qosClass %q", p.Status.QosClass)
	}
	before := proto.Clone(p)
	if ApplyReport(p, "n1", report(5, "Running")) {
		t.Fatal("the same report applied twice")
	}
	if ApplyReport(p, "n1", report(3, "Pending")) {
		t.Fatal("an older report applied")
	}
	if ApplyReport(p, "n2", report(9, "Failed")) {
		t.Fatal("a report from another node applied")
	}
	if !proto.Equal(before, p) {
		t.Fatal("ignored reports changed the pod")
	}
}

// TestApplyReportKeepsTerminalPhase: a pod whose phase was set Failed
// through pods/status stays Failed when its node still reports it Running
// (kubelet: "API phase was terminal, updating phase to match"); the rest
// of the report applies.
func TestApplyReportKeepsTerminalPhase(t *testing.T) {
	p := boundPod()
	p.Status.Phase = "Failed"
	if !ApplyReport(p, "n1", report(4, "Running")) {
		t.Fatal("report not applied")
	}
	if p.Status.Phase != "Failed" || p.Status.PodIp != "10.244.1.5" {
		t.Fatalf("phase %q ip %q, want Failed and the report's ip", p.Status.Phase, p.Status.PodIp)
	}
	if !ApplyReport(p, "n1", report(5, "Succeeded")) || p.Status.Phase != "Succeeded" {
		t.Fatalf("a terminal report: phase %q", p.Status.Phase)
	}
}

// TestApplyReportKeepsOthersConditions: conditions the node does not own
// survive its reports, as kubelet's mergePodStatus keeps them: the
// eviction's DisruptionTarget (a Job's podFailurePolicy matches on it once
// the pod has failed) and a readiness gate's; the node's own Ready is the
// report's.
func TestApplyReportKeepsOthersConditions(t *testing.T) {
	p := boundPod()
	p.Status.Conditions = append(p.Status.Conditions,
		&corev1.PodCondition{Type: "DisruptionTarget", Status: "True", Reason: "EvictionByEvictionAPI"},
		&corev1.PodCondition{Type: "example.com/gate", Status: "True"},
		&corev1.PodCondition{Type: "Ready", Status: "False"})
	if !ApplyReport(p, "n1", report(2, "Failed")) {
		t.Fatal("report not applied")
	}
	for typ, want := range map[string]string{"PodScheduled": "True", "DisruptionTarget": "True", "example.com/gate": "True", "Ready": "True"} {
		if c := podrules.PodCondition(p.Status, typ); c.GetStatus() != want {
			t.Errorf("condition %s: %v, want status %s", typ, c, want)
		}
	}
	if c := podrules.PodCondition(p.Status, "DisruptionTarget"); c.GetReason() != "EvictionByEvictionAPI" {
		t.Errorf("DisruptionTarget reason %q", c.GetReason())
	}
}

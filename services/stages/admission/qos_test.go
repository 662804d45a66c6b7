package admission

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// TestQOSClassAfterAdmission: after admission defaults requests from
// limits, the class is the same (podrules.QOSClass pins the class itself).
func TestQOSClassAfterAdmission(t *testing.T) {
	res := mustAdmit(t, pod(func(p *corev1.Pod) {
		app(p).Resources = &corev1.ResourceRequirements{Limits: map[string]string{"cpu": "1", "memory": "1Gi"}}
	}), State{})
	if res.Pod.Status.QosClass != podrules.QOSGuaranteed {
		t.Fatalf("admitted pod qosClass = %s, want Guaranteed", res.Pod.Status.QosClass)
	}
}

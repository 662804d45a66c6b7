package replicaset

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/controller"
)

// TestCalculateStatus: the status counts the active pods, those with all
// the template's labels, the ready ones and those ready for
// minReadySeconds, and the terminating ones; a failed manage sets the
// ReplicaFailure condition.
func TestCalculateStatus(t *testing.T) {
	now := time.Now()
	tmpl := map[string]string{"app": "web", "pod-template-hash": "h1"}
	pod := func(ls map[string]string, readyFor time.Duration) *corev1.Pod {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Labels: ls}, Status: &corev1.PodStatus{Phase: "Running"}}
		if readyFor > 0 {
			p.Status.Conditions = []*corev1.PodCondition{{Type: "Ready", Status: "True", LastTransitionTime: timestamppb.New(now.Add(-readyFor))}}
		}
		return p
	}
	pods := []*corev1.Pod{
		pod(tmpl, time.Minute),
		pod(tmpl, time.Second),
		pod(tmpl, 0),
		pod(map[string]string{"app": "web"}, time.Minute), // selected, not fully labelled
	}
	three := int32(3)
	rs := &apps.ReplicaSet{Spec: apps.ReplicaSetSpec{Replicas: &three, MinReadySeconds: 10, Template: v1.PodTemplateSpec{}}}
	rs.Spec.Template.Labels = tmpl
	template := controller.NewLabelMatcher(labels.Set(tmpl).AsSelectorPreValidated())

	st := calculateStatus(rs, template, pods, 2, nil, true, now)
	if st.Replicas != 4 || st.FullyLabeledReplicas != 3 || st.ReadyReplicas != 3 || st.AvailableReplicas != 2 ||
		st.TerminatingReplicas == nil || *st.TerminatingReplicas != 2 || len(st.Conditions) != 0 {
		t.Fatalf("status %+v, want replicas 4, fully labelled 3, ready 3, available 2, terminating 2, no condition", st)
	}
	if st := calculateStatus(rs, template, pods, 2, nil, false, now); st.TerminatingReplicas != nil {
		t.Errorf("a ReplicationController's status counts terminating pods: %d", *st.TerminatingReplicas)
	}
	st = calculateStatus(rs, template, pods[:2], 0, errors.New("refused"), true, now)
	if len(st.Conditions) != 1 || st.Conditions[0].Type != apps.ReplicaSetReplicaFailure || st.Conditions[0].Reason != "FailedCreate" {
		t.Errorf("conditions after a failed creation: %+v", st.Conditions)
	}
}

package pipeline

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
)

// TestStatusCheckWithoutMetadata: a status write of a pod without
// metadata is refused like any other change beyond the status; red
// before: the check dereferenced the written pod's nil metadata and the
// panic took the store leader down.
func TestStatusCheckWithoutMetadata(t *testing.T) {
	stored, err := vt.Marshal(&corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: &corev1.PodSpec{NodeName: "n1"}})
	if err != nil {
		t.Fatal(err)
	}
	written, err := vt.Marshal(&corev1.Pod{Spec: &corev1.PodSpec{NodeName: "n1"}, Status: &corev1.PodStatus{Phase: "Running"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := statusPodWrite(stored, written); err == nil {
		t.Fatal("the status stage dropped a pod's metadata")
	}
}

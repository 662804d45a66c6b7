package manifest

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEventRoundTrip: a core/v1 Event keeps every field it is given,
// series and related included, through the store's form (the
// conformance test "Events should manage the lifecycle of an event"
// updates the series and reads it back).
func TestEventRoundTrip(t *testing.T) {
	in := &corev1.Event{
		TypeMeta:            metav1.TypeMeta{Kind: "Event", APIVersion: "v1"},
		ObjectMeta:          metav1.ObjectMeta{Name: "e", Namespace: "d"},
		InvolvedObject:      corev1.ObjectReference{Kind: "Pod", Namespace: "d", Name: "p", UID: "u1", APIVersion: "v1"},
		Reason:              "Testing",
		Message:             "a test event",
		Source:              corev1.EventSource{Component: "c", Host: "h"},
		FirstTimestamp:      metav1.Unix(1505828900, 0),
		LastTimestamp:       metav1.Unix(1505828950, 0),
		Count:               3,
		Type:                "Normal",
		EventTime:           metav1.NewMicroTime(time.Unix(1505828956, 123456000)),
		Series:              &corev1.EventSeries{Count: 100, LastObservedTime: metav1.NewMicroTime(time.Unix(1505828956, 0))},
		Action:              "Act",
		Related:             &corev1.ObjectReference{Kind: "Node", Name: "n1", APIVersion: "v1"},
		ReportingController: "example.com/c",
		ReportingInstance:   "c-1",
	}
	m, err := FromKube(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ToKube(m)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Event)
	if !equality.Semantic.DeepEqual(in, got) {
		t.Errorf("round trip changed the event:\n in %+v\nout %+v", in, got)
	}
}

package apiserver_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// TestEventUpdateKeepsWhatWasWritten: an Event updated with a series
// reads back as written, with no generation (kube's event strategy keeps
// none) — the conformance test "Events should manage the lifecycle of an
// event" compares the whole object.
func TestEventUpdateKeepsWhatWasWritten(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	cs := s.adminClientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := cs.CoreV1().Events("default")
	ev := &k8scorev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "e1"},
		InvolvedObject: k8scorev1.ObjectReference{Namespace: "default"},
		Reason:         "Test", Message: "a test event", Type: "Normal", Count: 1,
		Source: k8scorev1.EventSource{Component: "test"},
	}
	created, err := events.Create(ctx, ev, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Generation != 0 {
		t.Errorf("created with generation %d, want none", created.Generation)
	}
	created.Series = &k8scorev1.EventSeries{Count: 100, LastObservedTime: metav1.MicroTime{Time: time.Unix(1505828956, 0)}}
	created.Related = &k8scorev1.ObjectReference{Kind: "Node", Name: "n1"}
	created.ResourceVersion, created.ManagedFields = "", nil
	if _, err := events.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := events.Get(ctx, "e1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.ResourceVersion, got.ManagedFields = "", nil
	if !equality.Semantic.DeepEqual(created, got) {
		t.Errorf("read back\n%+v\nwritten\n%+v", got, created)
	}
}

// TestEventsV1Writes: events.k8s.io/v1 takes creates, patches, updates,
// deletes and deletecollection, stored as core/v1 Events (the conformance
// tests "Events API should ensure that an event can be fetched, patched,
// deleted, and listed" and "should delete a collection of events").
func TestEventsV1Writes(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	cs := s.adminClientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := cs.EventsV1().Events("default")
	newEvent := func(name string) *eventsv1.Event {
		return &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"set": "true"}},
			Regarding:  k8scorev1.ObjectReference{Namespace: "default"},
			EventTime:  metav1.MicroTime{Time: time.Unix(1505828956, 0)},
			Note:       "This is " + name, Action: "Do", Reason: "Test", Type: "Normal",
			ReportingController: "test-controller", ReportingInstance: "test-node",
		}
	}
	if _, err := client.Create(ctx, newEvent("e1"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	core, err := cs.CoreV1().Events("default").Get(ctx, "e1", metav1.GetOptions{})
	if err != nil || core.Message != "This is e1" || core.ReportingController != "test-controller" || core.Action != "Do" {
		t.Fatalf("the core/v1 Event: %+v %v", core, err)
	}
	list, err := client.List(ctx, metav1.ListOptions{FieldSelector: "reportingController=test-controller"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "e1" {
		t.Fatalf("list by reportingController: %v %v", list, err)
	}
	got, err := client.Get(ctx, "e1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldData, _ := json.Marshal(got)
	next := got.DeepCopy()
	next.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.MicroTime{Time: time.Unix(1505828951, 0)}}
	newData, _ := json.Marshal(next)
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, eventsv1.Event{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Patch(ctx, "e1", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch: %v", err)
	}
	read := func() *eventsv1.Event {
		t.Helper()
		e, err := client.Get(ctx, "e1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.ResourceVersion, e.ManagedFields = "", nil
		return e
	}
	want := got.DeepCopy()
	want.Series = next.Series
	want.ResourceVersion, want.ManagedFields = "", nil
	if e := read(); !equality.Semantic.DeepEqual(want, e) {
		t.Errorf("after the patch\n%+v\nwant\n%+v", e, want)
	}
	want.Series = &eventsv1.EventSeries{Count: 100, LastObservedTime: metav1.MicroTime{Time: time.Unix(1505828956, 0)}}
	if _, err := client.Update(ctx, want, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	if e := read(); !equality.Semantic.DeepEqual(want, e) {
		t.Errorf("after the update\n%+v\nwant\n%+v", e, want)
	}
	if err := client.Delete(ctx, "e1", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	for _, n := range []string{"s1", "s2", "s3"} {
		if _, err := client.Create(ctx, newEvent(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "set=true"}); err != nil {
		t.Fatalf("deletecollection: %v", err)
	}
	if list, err := client.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("left after deletecollection: %v %v", list, err)
	}
}

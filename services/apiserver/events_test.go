package apiserver_test

import (
	"context"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestEventUpdateKeepsWhatWasWritten: an Event updated with a series
// reads back as written, with no generation (kube's event strategy keeps
// none) — the conformance test "Events should manage the lifecycle of an
// event" compares the whole object.
func TestEventUpdateKeepsWhatWasWritten(t *testing.T) {
	s := startSystem(t, options{})
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
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

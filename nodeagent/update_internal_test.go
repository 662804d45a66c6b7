package nodeagent

import (
	"slices"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestUpdateReplacesPending: a pod update the worker has not taken yet is
// replaced by the next one — metadata, images and ephemeral containers
// together — but for its ephemeral containers when the next has none (a
// stale read): the list only grows, so they are kept. update never
// blocks, whatever is pending.
func TestUpdateReplacesPending(t *testing.T) {
	pod := func(label, image string, ephs ...string) *corev1.Pod {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Labels: map[string]string{"v": label}},
			Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: image}}}}
		for _, e := range ephs {
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, &corev1.EphemeralContainer{Name: e, Image: "busybox"})
		}
		return p
	}
	names := func(ephs []*corev1.EphemeralContainer) (out []string) {
		for _, e := range ephs {
			out = append(out, e.GetName())
		}
		return out
	}
	tests := []struct {
		name      string
		given     []*corev1.Pod // updates, none taken in between
		label     string
		image     string
		ephemeral []string
	}{
		{"one update", []*corev1.Pod{pod("a", "img:1", "debug")}, "a", "img:1", []string{"debug"}},
		{"the latest wins", []*corev1.Pod{pod("a", "img:1", "debug"), pod("b", "img:2", "debug", "more")}, "b", "img:2", []string{"debug", "more"}},
		{"a later one without ephemeral containers keeps the pending ones", []*corev1.Pod{pod("a", "img:1", "debug"), pod("b", "img:2")}, "b", "img:2", []string{"debug"}},
		{"none at all", []*corev1.Pod{pod("a", "img:1"), pod("b", "img:2"), pod("c", "img:3")}, "c", "img:3", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &worker{}
			for _, p := range tc.given {
				w.update(p)
			}
			u := w.takeUpdate()
			if u == nil {
				t.Fatal("no update pending")
			}
			if got := u.md.GetLabels()["v"]; got != tc.label {
				t.Errorf("label v = %q, want %q", got, tc.label)
			}
			if got := u.images.apps["c"]; got != tc.image {
				t.Errorf("image of c = %q, want %q", got, tc.image)
			}
			if got := names(u.ephs); !slices.Equal(got, tc.ephemeral) {
				t.Errorf("ephemeral containers = %v, want %v", got, tc.ephemeral)
			}
		})
	}
}

// TestUpdateTakenOnce: a taken update is no longer pending, and the next
// update after it stands alone (it keeps no ephemeral containers of the
// one taken).
func TestUpdateTakenOnce(t *testing.T) {
	w := &worker{}
	if w.takeUpdate() != nil {
		t.Fatal("an update pending on a new worker")
	}
	w.update(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p"}, Spec: &corev1.PodSpec{
		EphemeralContainers: []*corev1.EphemeralContainer{{Name: "debug", Image: "busybox"}}}})
	if u := w.takeUpdate(); u == nil || len(u.ephs) != 1 {
		t.Fatalf("first update = %v, want one with an ephemeral container", u)
	}
	if u := w.takeUpdate(); u != nil {
		t.Fatalf("update pending after it was taken: %v", u)
	}
	w.update(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p"}, Spec: &corev1.PodSpec{}})
	if u := w.takeUpdate(); u == nil || len(u.ephs) != 0 {
		t.Fatalf("second update = %v, want one without ephemeral containers", u)
	}
}

// TestDeleteQueuedOnce: while a delete is pending a later one is not
// queued, its grace (even a shorter one) not honoured; once taken, the
// next one is queued again.
func TestDeleteQueuedOnce(t *testing.T) {
	w := &worker{}
	if _, ok := w.takeDelete(); ok {
		t.Fatal("a delete pending on a new worker")
	}
	if !w.queueDelete(30 * time.Second) {
		t.Fatal("first delete not queued")
	}
	if w.queueDelete(time.Second) {
		t.Error("second delete queued while the first is pending")
	}
	if g, ok := w.takeDelete(); !ok || g != 30*time.Second {
		t.Errorf("takeDelete = %v, %v; want 30s, true", g, ok)
	}
	if _, ok := w.takeDelete(); ok {
		t.Error("a delete pending after it was taken")
	}
	if !w.queueDelete(0) {
		t.Error("a delete after the taken one not queued")
	}
	if g, ok := w.takeDelete(); !ok || g != 0 {
		t.Errorf("takeDelete = %v, %v; want 0s, true", g, ok)
	}
}

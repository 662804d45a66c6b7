package nodeagent

import (
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
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
			w := labelled("none")
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
	w := labelled("none")
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
	w.update(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Labels: map[string]string{"v": "new"}}, Spec: &corev1.PodSpec{}})
	if u := w.takeUpdate(); u == nil || len(u.ephs) != 0 {
		t.Fatalf("second update = %v, want one without ephemeral containers", u)
	}
}

// labelled is a worker of pod "p" with the label v=value, one app
// container c of image img:0 and no update taken.
func labelled(value string) *worker {
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Labels: map[string]string{"v": value}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "img:0"}}}}
	w := &worker{pod: pod}
	w.apps = []*ctr{{spec: pod.Spec.Containers[0]}}
	return w
}

// takeUpdate returns the pending update and forgets it (nil: none).
func (w *worker) takeUpdate() *podUpdate {
	w.mail.Lock()
	defer w.mail.Unlock()
	u := w.next
	w.next = nil
	return u
}

// TestUpdateQueuedOnlyForAChange: with no update pending, a pod is queued
// only when onUpdate would change something taking it (its labels or
// annotations, a container's image, a new ephemeral container, its
// activeDeadlineSeconds); once one is pending, every pod replaces it.
func TestUpdateQueuedOnlyForAChange(t *testing.T) {
	base := func() *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Labels: map[string]string{"v": "1"}, ResourceVersion: "9"},
			Spec:   &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "img:0"}}},
			Status: &corev1.PodStatus{Phase: "Running"}}
	}
	deadline := func(s int64) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = &s } }
	tests := []struct {
		name   string
		worker func(*worker)
		edit   func(*corev1.Pod)
		queued bool
	}{
		{"the same pod", nil, nil, false},
		{"another status and resourceVersion", nil, func(p *corev1.Pod) { p.Status.Phase, p.Metadata.ResourceVersion = "Failed", "10" }, false},
		{"a label changed", nil, func(p *corev1.Pod) { p.Metadata.Labels["v"] = "2" }, true},
		{"a label added", nil, func(p *corev1.Pod) { p.Metadata.Labels["w"] = "1" }, true},
		{"an annotation added", nil, func(p *corev1.Pod) { p.Metadata.Annotations = map[string]string{"a": "1"} }, true},
		{"the status seq set", nil, func(p *corev1.Pod) { p.Metadata.Annotations = map[string]string{podrules.AnnotationStatusSeq: "7"} }, false},
		{"the status seq and an annotation set", nil, func(p *corev1.Pod) {
			p.Metadata.Annotations = map[string]string{podrules.AnnotationStatusSeq: "7", "a": "1"}
		}, true},
		{"the status seq changed", func(w *worker) {
			w.pod.Metadata.Annotations = map[string]string{podrules.AnnotationStatusSeq: "6", "a": "1"}
		}, func(p *corev1.Pod) {
			p.Metadata.Annotations = map[string]string{podrules.AnnotationStatusSeq: "7", "a": "1"}
		}, false},
		{"the status seq gone, an annotation with it", func(w *worker) {
			w.pod.Metadata.Annotations = map[string]string{podrules.AnnotationStatusSeq: "6", "a": "1"}
		}, nil, true},
		{"an image changed", nil, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "img:1" }, true},
		{"an image left out", nil, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, false},
		{"an unknown container's image", nil, func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, &corev1.Container{Name: "x", Image: "img:1"})
		}, false},
		{"an ephemeral container added", nil, func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []*corev1.EphemeralContainer{{Name: "debug", Image: "busybox"}}
		}, true},
		{"a known ephemeral container", func(w *worker) {
			w.onEphemeral([]*corev1.EphemeralContainer{{Name: "debug", Image: "busybox"}})
		}, func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []*corev1.EphemeralContainer{{Name: "debug", Image: "busybox"}}
		}, false},
		{"a deadline set", nil, deadline(30), true},
		{"the same deadline", func(w *worker) { w.onDeadline(i64(30)) }, deadline(30), false},
		{"a lower deadline", func(w *worker) { w.onDeadline(i64(30)) }, deadline(20), true},
		{"no deadline on a pod with one", func(w *worker) { w.onDeadline(i64(30)) }, nil, false},
		{"the same pod with an update pending", func(w *worker) {
			w.update(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Labels: map[string]string{"v": "3"}}, Spec: &corev1.PodSpec{}})
		}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := labelled("1")
			if tc.worker != nil {
				tc.worker(w)
			}
			p := base()
			if tc.edit != nil {
				tc.edit(p)
			}
			if got := w.update(p); got != tc.queued {
				t.Errorf("update queued = %v, want %v", got, tc.queued)
			}
			u := w.takeUpdate()
			if (u != nil) != tc.queued {
				t.Fatalf("pending update = %v, want one: %v", u, tc.queued)
			}
			if u != nil && !maps.Equal(u.md.GetLabels(), p.GetMetadata().GetLabels()) {
				t.Errorf("pending labels = %v, want the pod's %v", u.md.GetLabels(), p.GetMetadata().GetLabels())
			}
		})
	}
}

// TestAppliedUpdateIsCompared: once the step took an update, a pod equal
// to it changes nothing, one equal to the worker before it does.
func TestAppliedUpdateIsCompared(t *testing.T) {
	w := labelled("1")
	w.update(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Labels: map[string]string{"v": "2"}}, Spec: &corev1.PodSpec{}})
	w.applyUpdate()
	if w.update(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Labels: map[string]string{"v": "2"}}, Spec: &corev1.PodSpec{}}) {
		t.Error("the applied update's pod queued again")
	}
	if !w.update(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Labels: map[string]string{"v": "1"}}, Spec: &corev1.PodSpec{}}) {
		t.Error("the pod as it was before the update not queued")
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

package nodeagent

import (
	"slices"
	"testing"

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
			w := &worker{updateCh: make(chan podUpdate, 1)}
			for _, p := range tc.given {
				w.update(p)
			}
			var u podUpdate
			select {
			case u = <-w.updateCh:
			default:
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

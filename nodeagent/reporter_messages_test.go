package nodeagent_test

import (
	"testing"
)

// TestPodStartMessages: a pod's start to Ready costs the stream only its
// status reports — the steps, PodReady among them, travel inside them
// (eventsv1.Steps) — while a reader of the stream still sees every event.
func TestPodStartMessages(t *testing.T) {
	e := newEnv(t)
	p := newPod("web")
	e.bind(p)
	envs := e.waitReady(p.Metadata.Uid)
	reports := len(ofType(envs, "PodStatusReport"))
	if n := e.pub.Messages(); n != reports {
		t.Errorf("%d messages for %d status reports, want every event inside a report (%d unfolded events)", n, reports, len(envs))
	}
	if len(ofType(envs, "PodReady")) != 1 {
		t.Errorf("unfolded events %d PodReady, want 1", len(ofType(envs, "PodReady")))
	}
}

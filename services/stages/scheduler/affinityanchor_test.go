package scheduler

import (
	"slices"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"github.com/podflow/podflow/proto/corev1"
)

// TestFirstOfGroup: a decision reports that it relied on the first-pod
// exemption exactly when the pod's required affinity terms match no pod
// in the snapshot and match the pod itself — the decisions whose binds
// compare the anchors.
func TestFirstOfGroup(t *testing.T) {
	grp := &corev1.LabelSelector{MatchLabels: map[string]string{"app": "grp"}}
	nodes := []*corev1.Node{zoneNode("node-a", "zone1"), zoneNode("node-b", "zone2")}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		pods  []*corev1.Pod
		first bool
	}{
		{"no pod of the group anywhere: the first", mkPod("p", "", "", podLabels("app", "grp"), affinityTo("zone", grp)), placed("node-a", 1, podLabels("app", "other")), true},
		{"the hostname key likewise", mkPod("p", "", "", podLabels("app", "grp"), affinityTo(podtopologyspread.LabelHostname, grp)), nil, true},
		{"a pod of the group bound: not the first", mkPod("p", "", "", podLabels("app", "grp"), affinityTo("zone", grp)), placed("node-b", 1, podLabels("app", "grp")), false},
		{"no required affinity", mkPod("p", "", "", podLabels("app", "grp"), preferAffinity(10, "zone", grp, false)), nil, false},
		{"only anti-affinity", mkPod("p", "", "", podLabels("app", "grp"), antiAffinityTo("zone", grp)), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestScheduler(t)
			res, err := s.Schedule(tc.pod, cacheWith(t, nodes, tc.pods...).Snapshot())
			if err != nil {
				t.Fatal(err)
			}
			if res.FirstOfGroup != tc.first {
				t.Errorf("FirstOfGroup = %v on %s, want %v", res.FirstOfGroup, res.Node, tc.first)
			}
		})
	}
	// A pod that does not match its own terms is no first: it fits nowhere.
	s := newTestScheduler(t)
	if res, err := s.Schedule(mkPod("p", "", "", affinityTo("zone", grp)), cacheWith(t, nodes).Snapshot()); err == nil {
		t.Errorf("a pod of no group with affinity to an absent group scheduled on %s (FirstOfGroup %v)", res.Node, res.FirstOfGroup)
	}
}

// TestAffinityAnchors: a term's anchor is named by which pods it selects
// (its namespaces resolved), not by its topology key or the order of its
// namespaces; terms selecting other pods have other anchors.
func TestAffinityAnchors(t *testing.T) {
	sel := func(app string) *corev1.LabelSelector {
		return &corev1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	with := func(ns string, terms ...*corev1.PodAffinityTerm) *corev1.Pod {
		p := mkPod("p", "", "", inNamespace(ns))
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}}
		return p
	}
	anchor := func(p *corev1.Pod) string {
		t.Helper()
		a := affinityAnchors(p)
		if len(a) != 1 {
			t.Fatalf("anchors %v, want one", a)
		}
		return a[0]
	}
	byZone := anchor(with("default", &corev1.PodAffinityTerm{TopologyKey: podtopologyspread.LabelTopologyZone, LabelSelector: sel("web")}))
	if byHost := anchor(with("default", &corev1.PodAffinityTerm{TopologyKey: podtopologyspread.LabelHostname, LabelSelector: sel("web")})); byHost != byZone {
		t.Errorf("the same pods by another key: anchor %s, want %s", byHost, byZone)
	}
	if listed := anchor(with("other", &corev1.PodAffinityTerm{TopologyKey: podtopologyspread.LabelHostname, LabelSelector: sel("web"), Namespaces: []string{"default"}})); listed != byZone {
		t.Errorf("the same namespace named: anchor %s, want %s", listed, byZone)
	}
	if a, b := anchor(with("x", &corev1.PodAffinityTerm{LabelSelector: sel("web"), Namespaces: []string{"b", "a"}})),
		anchor(with("x", &corev1.PodAffinityTerm{LabelSelector: sel("web"), Namespaces: []string{"a", "b"}})); a != b {
		t.Errorf("namespaces in another order: anchors %s and %s", a, b)
	}
	for name, p := range map[string]*corev1.Pod{
		"other labels":    with("default", &corev1.PodAffinityTerm{TopologyKey: podtopologyspread.LabelTopologyZone, LabelSelector: sel("db")}),
		"other namespace": with("other", &corev1.PodAffinityTerm{TopologyKey: podtopologyspread.LabelTopologyZone, LabelSelector: sel("web")}),
	} {
		if a := anchor(p); a == byZone {
			t.Errorf("%s: the anchor of app=web in default", name)
		}
	}
	two := affinityAnchors(with("default",
		&corev1.PodAffinityTerm{TopologyKey: podtopologyspread.LabelHostname, LabelSelector: sel("web")},
		&corev1.PodAffinityTerm{TopologyKey: podtopologyspread.LabelTopologyZone, LabelSelector: sel("web")},
		&corev1.PodAffinityTerm{TopologyKey: podtopologyspread.LabelTopologyZone, LabelSelector: sel("db")}))
	if len(two) != 2 || !slices.Contains(two, byZone) || !slices.IsSorted(two) {
		t.Errorf("three terms over two groups: anchors %v, want two, sorted, with %s", two, byZone)
	}
	if a := affinityAnchors(mkPod("p", "", "")); len(a) != 0 {
		t.Errorf("a pod without terms: anchors %v", a)
	}
}

package scheduler

import (
	"maps"
	"slices"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"github.com/podflow/podflow/proto/corev1"
)

// TestGuardedKeys: which domain records a bind guards on — the keys of
// the pod's own zone-wide rules, and of the listed rules that select it
// (as widened for the registry), that its node has.
func TestGuardedKeys(t *testing.T) {
	const zone, rack = podtopologyspread.LabelTopologyZone, "example.com/rack"
	sel := func(app string) *corev1.LabelSelector {
		return &corev1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	labelled := func(name, ns, app string) *corev1.Pod {
		p := mkPod(name, "100m", "")
		p.Metadata.Namespace = ns
		p.Metadata.Labels = map[string]string{"app": app, "hash": "h1"}
		return p
	}
	spread := func(p *corev1.Pod, key, when string, s *corev1.LabelSelector, matchKeys ...string) *corev1.Pod {
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, &corev1.TopologySpreadConstraint{
			MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: when, LabelSelector: s, MatchLabelKeys: matchKeys})
		return p
	}
	anti := func(p *corev1.Pod, term *corev1.PodAffinityTerm) *corev1.Pod {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{term}}}
		return p
	}
	// The registry after binds of these pods (each listing its rules).
	registry := func(owners ...*corev1.Pod) *guardRegistry {
		r, err := parseRegistry(nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range owners {
			if r, err = parseRegistry(r.with(zoneRules(o)), 1); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	nodeLabels := map[string]string{zone: "z1", rack: "r1", podtopologyspread.LabelHostname: "n1"}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		labels map[string]string
		owners []*corev1.Pod // bound before, with their rules listed
		want   []string
	}{
		{"no rules anywhere", labelled("p", "default", "web"), nodeLabels, nil, nil},
		{"own DoNotSchedule zone spread", spread(labelled("p", "default", "web"), zone, "DoNotSchedule", sel("web")), nodeLabels, nil, []string{zone}},
		{"ScheduleAnyway guards nothing", spread(labelled("p", "default", "web"), zone, "ScheduleAnyway", sel("web")), nodeLabels, nil, nil},
		{"hostname rules are the node record's", spread(labelled("p", "default", "web"), podtopologyspread.LabelHostname, "DoNotSchedule", sel("web")), nodeLabels, nil, nil},
		{"own rule, node without the key", spread(labelled("p", "default", "web"), zone, "DoNotSchedule", sel("web")), map[string]string{rack: "r1"}, nil, nil},
		{"selected by a listed spread", labelled("q", "default", "web"), nodeLabels,
			[]*corev1.Pod{spread(labelled("o", "default", "web"), zone, "DoNotSchedule", sel("web"))}, []string{zone}},
		{"a listed spread counts its own namespace only", labelled("q", "other", "web"), nodeLabels,
			[]*corev1.Pod{spread(labelled("o", "default", "web"), zone, "DoNotSchedule", sel("web"))}, nil},
		{"not selected by a listed spread", labelled("q", "default", "db"), nodeLabels,
			[]*corev1.Pod{spread(labelled("o", "default", "web"), zone, "DoNotSchedule", sel("web"))}, nil},
		// matchLabelKeys narrows what the constraint counts; the listed
		// rule drops it (wider: it still selects a pod of another hash).
		{"matchLabelKeys dropped from the listed rule", func() *corev1.Pod { p := labelled("q", "default", "web"); p.Metadata.Labels["hash"] = "h2"; return p }(), nodeLabels,
			[]*corev1.Pod{spread(labelled("o", "default", "web"), zone, "DoNotSchedule", sel("web"), "hash")}, []string{zone}},
		{"selected by a listed anti-affinity", labelled("q", "default", "web"), nodeLabels,
			[]*corev1.Pod{anti(labelled("o", "default", "guard"), &corev1.PodAffinityTerm{TopologyKey: rack, LabelSelector: sel("web")})}, []string{rack}},
		{"a listed anti-affinity's namespaces", labelled("q", "team-b", "web"), nodeLabels,
			[]*corev1.Pod{anti(labelled("o", "default", "guard"), &corev1.PodAffinityTerm{TopologyKey: rack, LabelSelector: sel("web"), Namespaces: []string{"team-b", "team-a"}})}, []string{rack}},
		{"a listed namespaceSelector selects every namespace", labelled("q", "anywhere", "web"), nodeLabels,
			[]*corev1.Pod{anti(labelled("o", "default", "guard"), &corev1.PodAffinityTerm{TopologyKey: rack, LabelSelector: sel("web"),
				NamespaceSelector: &corev1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}})}, []string{rack}},
		{"own and listed, sorted once each", spread(labelled("p", "default", "web"), zone, "DoNotSchedule", sel("web")), nodeLabels,
			[]*corev1.Pod{
				spread(labelled("o", "default", "web"), zone, "DoNotSchedule", sel("web")),
				anti(labelled("g", "default", "guard"), &corev1.PodAffinityTerm{TopologyKey: rack, LabelSelector: sel("web")}),
			}, []string{rack, zone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := guardedKeys(tc.pod, false, tc.labels, registry(tc.owners...)); !slices.Equal(got, tc.want) {
				t.Errorf("guardedKeys = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestGuardRegistry: a rule is listed once however many pods carry it;
// the registry knows what it lacks; a corrupt entry is an error.
func TestGuardRegistry(t *testing.T) {
	p := mkPod("p", "100m", "")
	p.Spec.TopologySpreadConstraints = []*corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: podtopologyspread.LabelTopologyZone, WhenUnsatisfiable: "DoNotSchedule",
		LabelSelector: &corev1.LabelSelector{MatchLabels: map[string]string{"a": "1", "b": "2", "c": "3"}}}}
	rules := zoneRules(p)
	if len(rules) != 1 {
		t.Fatalf("zoneRules = %v, want one rule", rules)
	}
	for range 10 { // a map's order does not change the rule's name
		if again := zoneRules(p); !maps.Equal(again, rules) {
			t.Fatalf("zoneRules not deterministic: %v, then %v", rules, again)
		}
	}
	empty, _ := parseRegistry(nil, 0)
	if len(empty.missing(rules)) != 1 {
		t.Fatalf("an empty registry lacks the rule")
	}
	reg, err := parseRegistry(empty.with(rules), 7)
	if err != nil {
		t.Fatal(err)
	}
	if m := reg.missing(rules); len(m) != 0 || len(reg.entries) != 1 || reg.entries[0].key != podtopologyspread.LabelTopologyZone {
		t.Fatalf("registry after listing: missing %v, entries %+v", m, reg.entries)
	}
	bad := reg.with(map[string]string{guardAnnotationPrefix + "x": "not base64!"})
	if _, err := parseRegistry(bad, 8); err == nil {
		t.Fatal("a corrupt rule parsed")
	}
	withWriter, err := parseRegistry(reg.with(map[string]string{writerAnnotationPrefix + "scheduler-1.0a0b": ""}), 9)
	if err != nil || !slices.Equal(withWriter.writers, []string{"scheduler-1.0a0b"}) || len(withWriter.entries) != 1 {
		t.Fatalf("registry with a writer: %+v, %v", withWriter, err)
	}
	if got := DomainRecordName(podtopologyspread.LabelTopologyZone, "z1", "scheduler-1.0a0b"); got != "~domain:topology.kubernetes.io|zone=z1@scheduler-1.0a0b" {
		t.Errorf("DomainRecordName = %q", got)
	}
}

// TestFirstPodGuardedKeys: a bind on the first-pod exemption guards the
// cluster domain (on any node, labelled or not), and so does every bind
// of a pod a listed first pod's term selects; a pod's own required
// affinity guards nothing when its decision did not rely on the
// exemption.
func TestFirstPodGuardedKeys(t *testing.T) {
	first := mkPod("f", "100m", "")
	first.Metadata.Labels = map[string]string{"app": "web"}
	first.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []*corev1.PodAffinityTerm{{
		TopologyKey: podtopologyspread.LabelTopologyZone, LabelSelector: &corev1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}
	plain := func(app string) *corev1.Pod {
		p := mkPod("w", "100m", "")
		p.Metadata.Labels = map[string]string{"app": app}
		return p
	}
	empty, _ := parseRegistry(nil, 0)
	rules := firstPodRules(first)
	listed, err := parseRegistry(empty.with(rules), 1)
	if err != nil || len(rules) != 1 || len(listed.entries) != 1 || listed.entries[0].key != ClusterKey {
		t.Fatalf("first-pod rules %v listed as %+v (%v), want one over %q", rules, listed.entries, err, ClusterKey)
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		first bool
		reg   *guardRegistry
		want  []string
	}{
		{"a first pod, nothing listed", first, true, empty, []string{ClusterKey}},
		{"the same pod off the exemption", first, false, empty, nil},
		{"selected by a listed first pod's term", plain("web"), false, listed, []string{ClusterKey}},
		{"not selected by it", plain("db"), false, listed, nil},
	} {
		if got := guardedKeys(tc.pod, tc.first, nil, tc.reg); !slices.Equal(got, tc.want) {
			t.Errorf("%s: guardedKeys = %v, want %v", tc.name, got, tc.want)
		}
	}
}

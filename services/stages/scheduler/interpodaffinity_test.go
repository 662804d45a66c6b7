package scheduler

import (
	"maps"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/interpodaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"github.com/podflow/podflow/proto/corev1"
)

// Cases after kube-scheduler's interpodaffinity filtering_test.go and
// scoring_test.go, and the assign-pod-node page's examples.

var podAff = interpodaffinity.InterPodAffinity{}

func TestInterPodAffinityFilter(t *testing.T) {
	const aff, anti, existing = interpodaffinity.ReasonPodAffinity, interpodaffinity.ReasonPodAntiAffinity, interpodaffinity.ReasonExistingPodAntiAffinity
	security := func(v string) *corev1.LabelSelector {
		return &corev1.LabelSelector{MatchExpressions: []*corev1.LabelSelectorRequirement{{Key: "security", Operator: "In", Values: []string{v}}}}
	}
	s1 := podLabels("security", "S1")
	s2 := podLabels("security", "S2")
	nodes := func() []*corev1.Node {
		return []*corev1.Node{zoneNode("node-a", "zone1"), zoneNode("node-b", "zone1"), zoneNode("node-x", "zone2"), zoneNode("node-n", "")}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		pods []*corev1.Pod
		want map[string]string
	}{
		{
			name: "no terms, no existing anti-affinity: skipped",
			pod:  mkPod("p", "", "", s1),
			pods: placed("node-a", 1, s1),
			want: map[string]string{},
		},
		{
			name: "required affinity to S1 by zone: zone1 holds one",
			pod:  mkPod("p", "", "", affinityTo("zone", security("S1"))),
			pods: placed("node-a", 1, s1),
			want: map[string]string{"node-x": aff, "node-n": aff},
		},
		{
			name: "required affinity, no matching pod anywhere, the pod does not match itself",
			pod:  mkPod("p", "", "", affinityTo("zone", security("S1"))),
			pods: placed("node-a", 1, s2),
			want: map[string]string{"node-a": aff, "node-b": aff, "node-x": aff, "node-n": aff},
		},
		{
			name: "required affinity, no matching pod anywhere, the pod matches itself: the first of a group goes where the key is",
			pod:  mkPod("p", "", "", s1, affinityTo("zone", security("S1"))),
			pods: placed("node-a", 1, s2),
			want: map[string]string{"node-n": aff},
		},
		{
			name: "required affinity in another namespace does not match",
			pod:  mkPod("p", "", "", affinityTo("zone", security("S1"))),
			pods: placed("node-a", 1, s1, inNamespace("other")),
			want: map[string]string{"node-a": aff, "node-b": aff, "node-x": aff, "node-n": aff},
		},
		{
			name: "required affinity with namespaces lists the other namespace",
			pod: mkPod("p", "", "", func(p *corev1.Pod) {
				affinityTo("zone", security("S1"))(p)
				p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].Namespaces = []string{"other"}
			}),
			pods: placed("node-a", 1, s1, inNamespace("other")),
			want: map[string]string{"node-x": aff, "node-n": aff},
		},
		{
			name: "required affinity with an empty namespaceSelector matches every namespace",
			pod: mkPod("p", "", "", func(p *corev1.Pod) {
				affinityTo("zone", security("S1"))(p)
				p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].NamespaceSelector = &corev1.LabelSelector{}
			}),
			pods: placed("node-x", 1, s1, inNamespace("other")),
			want: map[string]string{"node-a": aff, "node-b": aff, "node-n": aff},
		},
		{
			name: "required affinity: the existing pod must match every term",
			pod:  mkPod("p", "", "", affinityTo("zone", security("S1")), affinityTo(podtopologyspread.LabelHostname, exists("app"))),
			pods: append(placed("node-a", 1, s1), placed("node-b", 1, podLabels("app", "x"))...),
			want: map[string]string{"node-a": aff, "node-b": aff, "node-x": aff, "node-n": aff},
		},
		{
			name: "required anti-affinity to S1 by hostname",
			pod:  mkPod("p", "", "", antiAffinityTo(podtopologyspread.LabelHostname, security("S1"))),
			pods: placed("node-a", 1, s1),
			want: map[string]string{"node-a": anti},
		},
		{
			name: "required anti-affinity to S1 by zone",
			pod:  mkPod("p", "", "", antiAffinityTo("zone", security("S1"))),
			pods: placed("node-a", 1, s1),
			want: map[string]string{"node-a": anti, "node-b": anti},
		},
		{
			name: "existing pod's anti-affinity rejects the incoming pod it selects (symmetry)",
			pod:  mkPod("p", "", "", s1),
			pods: placed("node-a", 1, antiAffinityTo("zone", security("S1"))),
			want: map[string]string{"node-a": existing, "node-b": existing},
		},
		{
			name: "existing pod's anti-affinity in another namespace applies only with its namespaces",
			pod:  mkPod("p", "", "", s1),
			pods: placed("node-a", 1, inNamespace("other"), antiAffinityTo("zone", security("S1"))),
			want: map[string]string{},
		},
		{
			name: "existing pod's anti-affinity with a namespaceSelector of the incoming pod's namespace",
			pod:  mkPod("p", "", "", s1),
			pods: placed("node-a", 1, inNamespace("other"), antiAffinityTo("zone", security("S1"), func(t *corev1.PodAffinityTerm) {
				t.NamespaceSelector = &corev1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
			})),
			want: map[string]string{"node-a": existing, "node-b": existing},
		},
		{
			name: "affinity passes, anti-affinity of the incoming pod rejects",
			pod:  mkPod("p", "", "", affinityTo("zone", security("S1")), antiAffinityTo(podtopologyspread.LabelHostname, security("S2"))),
			pods: append(placed("node-a", 1, s1), placed("node-b", 1, s2)...),
			want: map[string]string{"node-b": anti, "node-x": aff, "node-n": aff},
		},
		{
			name: "matchLabelKeys: anti-affinity only to pods of the same revision",
			pod: mkPod("p", "", "", podLabels("app", "web", "rev", "2"), antiAffinityTo(podtopologyspread.LabelHostname, exists("app"), func(t *corev1.PodAffinityTerm) {
				t.MatchLabelKeys = []string{"rev"}
			})),
			pods: append(placed("node-a", 1, podLabels("app", "web", "rev", "1")), placed("node-b", 1, podLabels("app", "web", "rev", "2"))...),
			want: map[string]string{"node-b": anti},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cacheWith(t, nodes(), tt.pods...)
			c.SetNamespace(&corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: "default", Labels: map[string]string{"team": "a"}}})
			got := runFilterOnCache(t, podAff, tt.pod, c)
			if !maps.Equal(got, tt.want) {
				t.Errorf("rejected %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInterPodAffinityScore(t *testing.T) {
	nodes := func() []*corev1.Node {
		return []*corev1.Node{zoneNode("node-a", "zone1"), zoneNode("node-b", "zone1"), zoneNode("node-x", "zone2")}
	}
	web := podLabels("app", "web")
	tests := []struct {
		name string
		pod  *corev1.Pod
		pods []*corev1.Pod
		want map[string]int64
	}{
		{
			name: "nothing to prefer: skipped",
			pod:  mkPod("p", "", "", web),
			pods: placed("node-a", 1, web),
			want: map[string]int64{"node-a": 0, "node-b": 0, "node-x": 0},
		},
		{
			name: "preferred affinity to web by zone",
			pod:  mkPod("p", "", "", preferAffinity(5, "zone", exists("app"), false)),
			pods: placed("node-a", 1, web),
			want: map[string]int64{"node-a": 100, "node-b": 100, "node-x": 0},
		},
		{
			name: "preferred anti-affinity to web by hostname",
			pod:  mkPod("p", "", "", preferAffinity(5, podtopologyspread.LabelHostname, exists("app"), true)),
			pods: placed("node-a", 1, web),
			want: map[string]int64{"node-a": 0, "node-b": 100, "node-x": 100},
		},
		{
			name: "affinity and anti-affinity weigh against each other",
			pod: mkPod("p", "", "", preferAffinity(10, "zone", exists("app"), false),
				preferAffinity(5, podtopologyspread.LabelHostname, exists("app"), true)),
			// zone1: +10 (a and b); a: -5 → a 5, b 10, x 0
			pods: placed("node-a", 1, web),
			want: map[string]int64{"node-a": 50, "node-b": 100, "node-x": 0},
		},
		{
			name: "existing pod's required affinity attracts the pod it selects (weight 1)",
			pod:  mkPod("p", "", "", web),
			pods: placed("node-x", 1, affinityTo("zone", exists("app"))),
			want: map[string]int64{"node-a": 0, "node-b": 0, "node-x": 100},
		},
		{
			name: "existing pod's preferred anti-affinity repels the pod it selects",
			pod:  mkPod("p", "", "", web),
			pods: placed("node-x", 1, preferAffinity(20, "zone", exists("app"), true)),
			want: map[string]int64{"node-a": 100, "node-b": 100, "node-x": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runPluginScore(t, podAff, tt.pod, nodes(), tt.pods)
			if !maps.Equal(got, tt.want) {
				t.Errorf("scores %v, want %v", got, tt.want)
			}
		})
	}
}

// TestInterPodAffinitySchedule places replicas with required
// anti-affinity to each other, one per node, through Schedule and
// AssumePod; the fourth finds no node, in kube-scheduler's words, and a
// plain pod the replicas' anti-affinity selects is kept off them.
func TestInterPodAffinitySchedule(t *testing.T) {
	c := cacheWith(t, []*corev1.Node{zoneNode("node-a", "zone1"), zoneNode("node-b", "zone1"), zoneNode("node-x", "zone2")})
	s := newTestScheduler(t)
	snap := framework.NewSnapshot()
	used := map[string]bool{}
	for i := range 4 {
		pod := mkPod(fmtName("web", i), "100m", "64Mi", podLabels("app", "web"), antiAffinityTo(podtopologyspread.LabelHostname, exists("app")))
		c.UpdateSnapshot(snap)
		res, err := s.Schedule(pod, snap)
		if i == 3 {
			const want = "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.."
			if err == nil || err.Error() != want {
				t.Fatalf("fourth replica: %v, want %q", err, want)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if used[res.Node] {
			t.Fatalf("two replicas on %s", res.Node)
		}
		used[res.Node] = true
		if err := c.AssumePod(pod, res.Node); err != nil {
			t.Fatal(err)
		}
	}
	c.UpdateSnapshot(snap)
	_, err := s.Schedule(mkPod("other", "100m", "64Mi", podLabels("app", "other")), snap)
	const want = "0/3 nodes are available: 3 node(s) didn't satisfy existing pods anti-affinity rules. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.."
	if err == nil || err.Error() != want {
		t.Errorf("pod selected by the replicas' anti-affinity: %v, want %q", err, want)
	}
}

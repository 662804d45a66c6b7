package scheduler

import (
	"maps"
	"math"
	"strings"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"github.com/podflow/podflow/proto/corev1"
)

// The system default constraints, after kube-scheduler's podtopologyspread
// scoring_test.go (TestPreScoreStateEmptyNodes' "system defaults
// constraints and a replica set" and its neighbours), with Services as
// the owners podflow serves.

func mkService(ns, name string, sel map[string]string) *corev1.Service {
	return &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: ns, Name: name}, Spec: &corev1.ServiceSpec{Selector: sel}}
}

func cacheWithServices(t *testing.T, nodes []*corev1.Node, pods []*corev1.Pod, svcs ...*corev1.Service) *cache.Cache {
	t.Helper()
	c := cacheWith(t, nodes, pods...)
	for _, s := range svcs {
		c.SetService(s)
	}
	return c
}

// defaultZoneNode is a node with hostname and, unless zone is "", the
// well-known zone label.
func defaultZoneNode(name, zone string) *corev1.Node {
	n := mkNode(name, "8", "16Gi", labels(podtopologyspread.LabelHostname, name))
	if zone != "" {
		n.Metadata.Labels[podtopologyspread.LabelTopologyZone] = zone
	}
	return n
}

func TestPodTopologySpreadDefaultConstraintsState(t *testing.T) {
	fooTar := podLabels("foo", "tar", "baz", "sup")
	type want struct {
		keys    []string           // constraints' topology keys, in order
		skews   []int64            // and maxSkews
		matches map[string]bool    // labels of "probe" pods -> selected
		counts  []map[string]int64 // per constraint
		weights []float64
	}
	tests := []struct {
		name  string
		pod   *corev1.Pod
		nodes []*corev1.Node
		svcs  []*corev1.Service
		want  *want // nil: PreScore skips
	}{
		{
			name:  "system defaults constraints and a service",
			pod:   mkPod("p", "", "", fooTar),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "mars")},
			svcs:  []*corev1.Service{mkService("default", "s", map[string]string{"foo": "tar"})},
			want: &want{
				keys: []string{podtopologyspread.LabelHostname, podtopologyspread.LabelTopologyZone}, skews: []int64{3, 5},
				matches: map[string]bool{"foo=tar": true, "foo=bar": false},
				counts:  []map[string]int64{{}, {"mars": 0}},
				weights: []float64{math.Log(1 + 2), math.Log(1 + 2)},
			},
		},
		{
			name:  "two services selecting the pod: their selectors merged",
			pod:   mkPod("p", "", "", fooTar),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "mars")},
			svcs: []*corev1.Service{mkService("default", "s1", map[string]string{"foo": "tar"}),
				mkService("default", "s2", map[string]string{"baz": "sup"})},
			want: &want{
				keys: []string{podtopologyspread.LabelHostname, podtopologyspread.LabelTopologyZone}, skews: []int64{3, 5},
				matches: map[string]bool{"foo=tar,baz=sup": true, "foo=tar": false, "baz=sup": false},
				counts:  []map[string]int64{{}, {"mars": 0}},
				weights: []float64{math.Log(1 + 2), math.Log(1 + 2)},
			},
		},
		{
			name:  "a node without a zone label is kept (hostname spreading) and its empty zone counted",
			pod:   mkPod("p", "", "", fooTar),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "mars"), defaultZoneNode("node-b", "")},
			svcs:  []*corev1.Service{mkService("default", "s", map[string]string{"foo": "tar"})},
			want: &want{
				keys: []string{podtopologyspread.LabelHostname, podtopologyspread.LabelTopologyZone}, skews: []int64{3, 5},
				matches: map[string]bool{"foo=tar": true},
				counts:  []map[string]int64{{}, {"mars": 0, "": 0}},
				weights: []float64{math.Log(2 + 2), math.Log(2 + 2)},
			},
		},
		{
			name:  "a service that doesn't match",
			pod:   mkPod("p", "", "", fooTar),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "mars")},
			svcs:  []*corev1.Service{mkService("default", "s", map[string]string{"foo": "bar"})},
		},
		{
			name:  "a service in another namespace",
			pod:   mkPod("p", "", "", fooTar),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "mars")},
			svcs:  []*corev1.Service{mkService("other", "s", map[string]string{"foo": "tar"})},
		},
		{
			name:  "a service without a selector selects nothing",
			pod:   mkPod("p", "", "", fooTar),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "mars")},
			svcs:  []*corev1.Service{mkService("default", "s", nil)},
		},
		{
			name:  "no service",
			pod:   mkPod("p", "", "", fooTar),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "mars")},
		},
		{
			name: "a service, but the pod has constraints: only its own apply",
			pod: mkPod("p", "", "", fooTar, spreadBy(1, "zone", "DoNotSchedule", exists("foo")),
				spreadBy(2, "planet", "ScheduleAnyway", exists("baz"))),
			nodes: []*corev1.Node{zoneNode("node-a", "", labels("planet", "mars", podtopologyspread.LabelTopologyZone, "z"))},
			svcs:  []*corev1.Service{mkService("default", "s", map[string]string{"foo": "tar"})},
			want: &want{
				keys: []string{"planet"}, skews: []int64{2},
				matches: map[string]bool{"baz=sup": true, "foo=tar": false},
				counts:  []map[string]int64{{"mars": 0}},
				weights: []float64{math.Log(1 + 2)},
			},
		},
		{
			name:  "a service, but the pod has only DoNotSchedule constraints: no scoring",
			pod:   mkPod("p", "", "", fooTar, spreadBy(1, "zone", "DoNotSchedule", exists("foo"))),
			nodes: []*corev1.Node{zoneNode("node-a", "zone1")},
			svcs:  []*corev1.Service{mkService("default", "s", map[string]string{"foo": "tar"})},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := cacheWithServices(t, tt.nodes, nil, tt.svcs...).Snapshot()
			var state framework.CycleState
			state.Reset(snap)
			st := spread.PreScore(&state, tt.pod, snap.Nodes())
			if tt.want == nil {
				if !st.IsSkip() {
					t.Fatalf("PreScore %v, want Skip", st)
				}
				return
			}
			if !st.IsSuccess() {
				t.Fatalf("PreScore %v", st)
			}
			s := state.Read(podtopologyspread.ScoreKey).(*podtopologyspread.State)
			if len(s.Constraints) != len(tt.want.keys) {
				t.Fatalf("%d constraints, want %d", len(s.Constraints), len(tt.want.keys))
			}
			for i, c := range s.Constraints {
				if c.Key != tt.want.keys[i] || c.MaxSkew != tt.want.skews[i] {
					t.Errorf("constraint %d: %s/%d, want %s/%d", i, c.Key, c.MaxSkew, tt.want.keys[i], tt.want.skews[i])
				}
				for probe, want := range tt.want.matches {
					if got := c.Selector.Matches(parseLabels(probe)); got != want {
						t.Errorf("constraint %d selects %s: %v, want %v", i, probe, got, want)
					}
				}
				if !maps.Equal(s.Counts[i], tt.want.counts[i]) {
					t.Errorf("constraint %d counts %v, want %v", i, s.Counts[i], tt.want.counts[i])
				}
				if math.Abs(s.Weights[i]-tt.want.weights[i]) > 1e-9 {
					t.Errorf("constraint %d weight %v, want %v", i, s.Weights[i], tt.want.weights[i])
				}
			}
		})
	}
}

// parseLabels parses "k=v,k=v".
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

func TestPodTopologySpreadDefaultConstraintsScore(t *testing.T) {
	web := podLabels("app", "web")
	svc := mkService("default", "web", map[string]string{"app": "web"})
	tests := []struct {
		name  string
		pod   *corev1.Pod
		nodes []*corev1.Node
		pods  []*corev1.Pod
		svcs  []*corev1.Service
		want  map[string]int64
	}{
		{
			name:  "no matching pods yet: every node 100",
			pod:   mkPod("p", "", "", web),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "zone1"), defaultZoneNode("node-b", "zone1"), defaultZoneNode("node-x", "zone2")},
			svcs:  []*corev1.Service{svc},
			want:  map[string]int64{"node-a": 100, "node-b": 100, "node-x": 100},
		},
		{
			// hostname weight log(3+2)=1.609, zone log(2+2)=1.386; zone1 3, zone2 0.
			// raw: a 2*1.609+2 + 3*1.386+4 = 13.38 → 13; b 1.609+2 + 4.16+4 = 11.77 → 12;
			// x 2+4 = 6; normalized 100*(13+6-s)/13.
			name:  "pods of the service spread 2/1/0 over zone1, zone1, zone2",
			pod:   mkPod("p", "", "", web),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "zone1"), defaultZoneNode("node-b", "zone1"), defaultZoneNode("node-x", "zone2")},
			pods:  append(append(placed("node-a", 2, web), placed("node-b", 1, web)...), placed("node-x", 5, podLabels("app", "other"))...),
			svcs:  []*corev1.Service{svc},
			want:  map[string]int64{"node-a": 46, "node-b": 53, "node-x": 100},
		},
		{
			// hostname weight log(2+2), zone log(2+2) (zones "zone1" and ""): a 1.386+2 + 1.386+4 = 8.77 → 9;
			// n 1.386+2 = 3.39 → 3 (no zone constraint); normalized 100*(9+3-s)/9.
			name:  "a node without a zone label is scored by hostname alone",
			pod:   mkPod("p", "", "", web),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "zone1"), defaultZoneNode("node-n", "")},
			pods:  append(placed("node-a", 1, web), placed("node-n", 1, web)...),
			svcs:  []*corev1.Service{svc},
			want:  map[string]int64{"node-a": 33, "node-n": 100},
		},
		{
			name:  "without a service the pod is not spread",
			pod:   mkPod("p", "", "", web),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "zone1"), defaultZoneNode("node-x", "zone2")},
			pods:  placed("node-a", 3, web),
			want:  map[string]int64{"node-a": 0, "node-x": 0},
		},
		{
			name:  "terminating pods and pods in other namespaces do not count",
			pod:   mkPod("p", "", "", web),
			nodes: []*corev1.Node{defaultZoneNode("node-a", "zone1"), defaultZoneNode("node-x", "zone2")},
			pods:  append(placed("node-a", 2, web, terminating), placed("node-a", 2, web, inNamespace("other"))...),
			svcs:  []*corev1.Service{svc},
			want:  map[string]int64{"node-a": 100, "node-x": 100},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runScoreOnCache(t, spread, tt.pod, cacheWithServices(t, tt.nodes, tt.pods, tt.svcs...))
			if !maps.Equal(got, tt.want) {
				t.Errorf("scores %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCacheServices: a Service's selector reaches the snapshot, an
// update replaces it, a removal (or a selector emptied) forgets it, and a
// snapshot taken before keeps what it saw.
func TestCacheServices(t *testing.T) {
	c := cache.NewCache()
	c.SetService(mkService("default", "web", map[string]string{"app": "web"}))
	before := c.Snapshot()
	c.SetService(mkService("default", "web", map[string]string{"app": "web2"}))
	if got := c.Snapshot().Services["default"]["web"]["app"]; got != "web2" {
		t.Errorf("after update: %q, want web2", got)
	}
	if got := before.Services["default"]["web"]["app"]; got != "web" {
		t.Errorf("earlier snapshot changed: %q", got)
	}
	c.SetService(mkService("default", "web", nil))
	if _, ok := c.Snapshot().Services["default"]; ok {
		t.Error("a Service without a selector is kept")
	}
	c.SetService(mkService("default", "web", map[string]string{"app": "web"}))
	c.RemoveService("default", "web")
	if len(c.Snapshot().Services) != 0 {
		t.Errorf("after removal: %v", c.Snapshot().Services)
	}
}

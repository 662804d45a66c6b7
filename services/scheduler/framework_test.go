package scheduler

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

var fakeKey = NewStateKey("PreFilterFake")

// fakePlugin records the extension points it is called at. It rejects
// nodes named in reject, scores nodes by score (raw, normalized to
// double) and can skip its Filter or Score, or fail its PreFilter.
type fakePlugin struct {
	calls                     *[]string
	reject                    map[string]bool
	score                     map[string]int64
	skipFilter, skipScore     bool
	preFilter, preFilterError *Status
}

func (f *fakePlugin) Name() string { return "Fake" }

func (f *fakePlugin) record(s string) { *f.calls = append(*f.calls, s) }

func (f *fakePlugin) PreFilter(state *CycleState, pod *corev1.Pod) *Status {
	f.record("PreFilter " + pod.GetMetadata().GetName())
	state.Write(fakeKey, pod.GetMetadata().GetName())
	switch {
	case f.preFilter != nil:
		return f.preFilter
	case f.skipFilter:
		return SkipStatus()
	}
	return nil
}

func (f *fakePlugin) Filter(state *CycleState, _ *corev1.Pod, n *NodeInfo) *Status {
	f.record("Filter " + n.Name() + " " + state.Read(fakeKey).(string))
	if f.reject[n.Name()] {
		return NewStatus(Unschedulable, "node(s) were rejected by Fake")
	}
	return nil
}

func (f *fakePlugin) PreScore(_ *CycleState, _ *corev1.Pod, feasible []*NodeInfo) *Status {
	f.record("PreScore " + strings.Join(names(feasible), ","))
	if f.skipScore {
		return SkipStatus()
	}
	return nil
}

func (f *fakePlugin) Score(_ *CycleState, _ *corev1.Pod, n *NodeInfo) int64 {
	f.record("Score " + n.Name())
	return f.score[n.Name()]
}

func (f *fakePlugin) ScoreExtensions() ScoreExtensions { return f }

func (f *fakePlugin) NormalizeScore(_ *CycleState, _ *corev1.Pod, scores []int64) *Status {
	f.record("NormalizeScore")
	for i := range scores {
		scores[i] *= 2
	}
	return nil
}

func names(nodes []*NodeInfo) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name()
	}
	return out
}

// fakeScheduler returns a Scheduler whose profile is the fake alone (with
// the weight) or, with defaults, the default plugins and then the fake.
func fakeScheduler(t *testing.T, f *fakePlugin, weight int64, defaults bool) *Scheduler {
	t.Helper()
	reg := InTreeRegistry()
	reg["Fake"] = func() (Plugin, error) { return f, nil }
	var specs []PluginSpec
	if defaults {
		specs = DefaultPlugins(DefaultWeights())
	}
	specs = append(specs, PluginSpec{Name: "Fake", Weight: weight})
	return newTestScheduler(t, func(c *Config) { c.Plugins, c.Registry = specs, reg })
}

func TestFrameworkCallsExtensionPoints(t *testing.T) {
	snap := uniformCluster(t, []string{"a", "b", "c"}).Snapshot()
	var calls []string
	f := &fakePlugin{calls: &calls, reject: map[string]bool{"b": true}, score: map[string]int64{"a": 10, "c": 40}}
	res, err := fakeScheduler(t, f, 1, false).Schedule(mkPod("p", "", ""), snap)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"PreFilter p",
		"Filter a p", "Filter b p", "Filter c p", // state written by PreFilter is read by Filter
		"PreScore a,c",
		"Score a", "Score c",
		"NormalizeScore",
	}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("calls\n%q, want\n%q", calls, want)
	}
	if res.Node != "c" || res.FeasibleNodes != 2 || len(res.Scores) != 2 {
		t.Fatalf("result %+v, want c of 2 feasible", res)
	}
	wantScores := []NodeScore{
		{Node: "c", Total: 80, Plugins: []PluginScore{{"Fake", 80}}},
		{Node: "a", Total: 20, Plugins: []PluginScore{{"Fake", 20}}},
	}
	if !reflect.DeepEqual(res.Scores, wantScores) {
		t.Errorf("scores %+v, want %+v", res.Scores, wantScores)
	}
	if got := res.Scores[0].String(); got != "c=80 (TaintToleration 0, NodeAffinity 0, LeastAllocated 0, BalancedAllocation 0, ImageLocality 0, Fake 80)" {
		t.Errorf("String() = %q", got)
	}
}

func TestFrameworkSkips(t *testing.T) {
	snap := uniformCluster(t, []string{"a", "b"}).Snapshot()
	var calls []string
	f := &fakePlugin{calls: &calls, reject: map[string]bool{"a": true, "b": true}, skipFilter: true, skipScore: true}
	if _, err := fakeScheduler(t, f, 1, false).Schedule(mkPod("p", "", ""), snap); err != nil {
		t.Fatal(err)
	}
	// Filter skipped (the nodes it would reject pass), Score skipped.
	if want := []string{"PreFilter p", "PreScore a,b"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
	// Weight 0: not a score plugin in this profile.
	calls = nil
	f.skipFilter, f.skipScore, f.reject = false, false, nil
	if _, err := fakeScheduler(t, f, 0, false).Schedule(mkPod("p", "", ""), snap); err != nil {
		t.Fatal(err)
	}
	if want := []string{"PreFilter p", "Filter a p", "Filter b p"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("weight 0: calls %q, want %q", calls, want)
	}
}

// TestFrameworkFilterReasonsAreCounted: a plugin's rejection reason is
// counted in kube-scheduler's message beside the in-tree filters' reasons,
// and a node rejected by an earlier filter never reaches a later one.
func TestFrameworkFilterReasonsAreCounted(t *testing.T) {
	nodes := []*corev1.Node{
		mkNode("small", "500m", "8Gi"), mkNode("big-1", "8", "8Gi"), mkNode("big-2", "8", "8Gi"),
		mkNode("gpu", "8", "8Gi", taints(tnt("dedicated", "gpu", "NoSchedule"))),
	}
	var calls []string
	f := &fakePlugin{calls: &calls, reject: map[string]bool{"big-1": true, "big-2": true, "small": true}}
	_, err := fakeScheduler(t, f, 1, true).Schedule(mkPod("p", "1", "1Gi"), cacheWith(t, nodes).Snapshot())
	var fe *FitError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a FitError", err)
	}
	const want = "0/4 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}, 2 node(s) were rejected by Fake."
	if fe.Error() != want {
		t.Errorf("message\n%q, want\n%q", fe.Error(), want)
	}
	slices.Sort(calls)
	if want := []string{"Filter big-1 p", "Filter big-2 p", "PreFilter p"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("calls %q, want %q (the in-tree filters run first)", calls, want)
	}
}

func TestFrameworkPreFilterOutcomes(t *testing.T) {
	snap := uniformCluster(t, []string{"a", "b", "c"}).Snapshot()
	t.Run("rejection rejects every node with kube-scheduler's message", func(t *testing.T) {
		var calls []string
		f := &fakePlugin{calls: &calls, preFilter: NewStatus(UnschedulableAndUnresolvable, "pod has an unsatisfiable constraint")}
		_, err := fakeScheduler(t, f, 1, false).Schedule(mkPod("p", "", ""), snap)
		var fe *FitError
		if !errors.As(err, &fe) {
			t.Fatalf("err = %v, want a FitError", err)
		}
		if want := "0/3 nodes are available: pod has an unsatisfiable constraint."; fe.Error() != want {
			t.Errorf("message %q, want %q", fe.Error(), want)
		}
		if len(fe.NodeReasons) != 3 || !reflect.DeepEqual(fe.NodeReasons["b"], []string{"pod has an unsatisfiable constraint"}) {
			t.Errorf("node reasons %v", fe.NodeReasons)
		}
		if want := []string{"PreFilter p"}; !reflect.DeepEqual(calls, want) {
			t.Errorf("calls %q, want %q", calls, want)
		}
	})
	t.Run("error fails the cycle", func(t *testing.T) {
		var calls []string
		boom := errors.New("boom")
		f := &fakePlugin{calls: &calls, preFilter: AsStatus(boom)}
		if _, err := fakeScheduler(t, f, 1, false).Schedule(mkPod("p", "", ""), snap); !errors.Is(err, boom) {
			t.Errorf("err = %v, want boom", err)
		}
	})
}

func TestConfigValidatePlugins(t *testing.T) {
	tests := []struct {
		name  string
		specs []PluginSpec
	}{
		{"unknown plugin", []PluginSpec{{Name: "PodTopologySpread"}}},
		{"enabled twice", []PluginSpec{{Name: NodeNameName}, {Name: NodeNameName}}},
		{"weight over 100", []PluginSpec{{Name: ImageLocalityName, Weight: 101}}},
		{"negative weight", []PluginSpec{{Name: ImageLocalityName, Weight: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Plugins = tt.specs
			if cfg.Validate() == nil {
				t.Error("Validate accepted an invalid profile")
			}
		})
	}
}

// TestBatchScorersMatchScore: every in-tree BatchScorer gives what its
// Score gives, node by node.
func TestBatchScorersMatchScore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	snap := cacheWith(t, variedCluster(rng, 200)).Snapshot()
	fw, err := newFramework(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		pod := variedPod(rng, i)
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, &corev1.Toleration{Key: "spot", Operator: "Exists"})
		for _, e := range fw.score {
			if e.batch == nil {
				continue
			}
			var state CycleState
			state.reset(snap)
			if e.preScore != nil && !e.preScore.PreScore(&state, pod, snap.Nodes()).IsSuccess() {
				continue
			}
			batch := make([]int64, snap.NumNodes())
			e.batch.ScoreNodes(&state, pod, snap.Nodes(), batch)
			for j, n := range snap.Nodes() {
				if s := e.pl.Score(&state, pod, n); s != batch[j] {
					t.Fatalf("pod %d, %s on %s: Score %d, ScoreNodes %d", i, e.name, n.Name(), s, batch[j])
				}
			}
		}
	}
}

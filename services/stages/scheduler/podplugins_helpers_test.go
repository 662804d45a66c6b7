package scheduler

import (
	"fmt"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
)

// Builders and runners for the tests of the pod-aware plugins
// (PodTopologySpread, InterPodAffinity).

func podLabels(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		if p.Metadata.Labels == nil {
			p.Metadata.Labels = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			p.Metadata.Labels[kv[i]] = kv[i+1]
		}
	}
}

func inNamespace(ns string) podOpt { return func(p *corev1.Pod) { p.Metadata.Namespace = ns } }

// exists is a selector requiring the label keys.
func exists(keys ...string) *corev1.LabelSelector {
	s := &corev1.LabelSelector{}
	for _, k := range keys {
		s.MatchExpressions = append(s.MatchExpressions, &corev1.LabelSelectorRequirement{Key: k, Operator: "Exists"})
	}
	return s
}

func spreadBy(maxSkew int32, key, when string, sel *corev1.LabelSelector, mut ...func(*corev1.TopologySpreadConstraint)) podOpt {
	return func(p *corev1.Pod) {
		c := &corev1.TopologySpreadConstraint{MaxSkew: maxSkew, TopologyKey: key, WhenUnsatisfiable: when, LabelSelector: sel}
		for _, m := range mut {
			m(c)
		}
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
	}
}

func podAffinity(p *corev1.Pod) *corev1.Affinity {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	a := p.Spec.Affinity
	if a.PodAffinity == nil {
		a.PodAffinity = &corev1.PodAffinity{}
	}
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	return a
}

func affinityTo(key string, sel *corev1.LabelSelector) podOpt {
	return func(p *corev1.Pod) {
		a := podAffinity(p).PodAffinity
		a.RequiredDuringSchedulingIgnoredDuringExecution = append(a.RequiredDuringSchedulingIgnoredDuringExecution,
			&corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: sel})
	}
}

func antiAffinityTo(key string, sel *corev1.LabelSelector, mut ...func(*corev1.PodAffinityTerm)) podOpt {
	return func(p *corev1.Pod) {
		t := &corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: sel}
		for _, m := range mut {
			m(t)
		}
		a := podAffinity(p).PodAntiAffinity
		a.RequiredDuringSchedulingIgnoredDuringExecution = append(a.RequiredDuringSchedulingIgnoredDuringExecution, t)
	}
}

func preferAffinity(weight int32, key string, sel *corev1.LabelSelector, anti bool) podOpt {
	return func(p *corev1.Pod) {
		w := &corev1.WeightedPodAffinityTerm{Weight: weight, PodAffinityTerm: &corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: sel}}
		a := podAffinity(p)
		if anti {
			a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, w)
		} else {
			a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution, w)
		}
	}
}

// zoneNode is a node with hostname and, unless zone is "", zone labels.
func zoneNode(name, zone string, opts ...nodeOpt) *corev1.Node {
	n := mkNode(name, "8", "16Gi", labels(podtopologyspread.LabelHostname, name))
	if zone != "" {
		n.Metadata.Labels["zone"] = zone
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

// placed returns n pods on node with the labels kv, named after the node.
func placed(node string, n int, opts ...podOpt) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, mkPod(fmt.Sprintf("%s-p%d", node, i), "", "", append([]podOpt{onNode(node)}, opts...)...))
	}
	return out
}

// runPluginFilter runs pl's PreFilter and Filter for pod over every node
// of a cluster of nodes and pods: the reason of each rejected node.
func runPluginFilter(t *testing.T, pl framework.FilterPlugin, pod *corev1.Pod, nodes []*corev1.Node, pods []*corev1.Pod) map[string]string {
	t.Helper()
	return runFilterOnCache(t, pl, pod, cacheWith(t, nodes, pods...))
}

// runFilterOnCache is runPluginFilter over the cache's snapshot.
func runFilterOnCache(t *testing.T, pl framework.FilterPlugin, pod *corev1.Pod, c *cache.Cache) map[string]string {
	t.Helper()
	snap := c.Snapshot()
	var state framework.CycleState
	state.Reset(snap)
	got := map[string]string{}
	if pf, ok := pl.(framework.PreFilterPlugin); ok {
		switch st := pf.PreFilter(&state, pod); {
		case st.IsSkip():
			return got
		case st.IsRejected():
			for _, n := range snap.Nodes() {
				got[n.Name()] = st.Message()
			}
			return got
		case !st.IsSuccess():
			t.Fatal(st.AsError())
		}
	}
	statuses := make([]*framework.Status, len(snap.Nodes()))
	pl.(framework.BatchFilter).FilterNodes(&state, pod, snap.Nodes(), statuses)
	for i, n := range snap.Nodes() {
		if st := pl.Filter(&state, pod, n); st.Message() != statuses[i].Message() {
			t.Errorf("node %s: Filter %q, FilterNodes %q", n.Name(), st.Message(), statuses[i].Message())
		}
		if statuses[i] != nil {
			got[n.Name()] = statuses[i].Message()
		}
	}
	return got
}

// runPluginScore runs pl's PreScore, Score and NormalizeScore for pod with
// every node feasible: each node's normalized score.
func runPluginScore(t *testing.T, pl framework.ScorePlugin, pod *corev1.Pod, nodes []*corev1.Node, pods []*corev1.Pod) map[string]int64 {
	t.Helper()
	return runScoreOnCache(t, pl, pod, cacheWith(t, nodes, pods...))
}

// runScoreOnCache is runPluginScore over the cache's snapshot.
func runScoreOnCache(t *testing.T, pl framework.ScorePlugin, pod *corev1.Pod, c *cache.Cache) map[string]int64 {
	t.Helper()
	snap := c.Snapshot()
	var state framework.CycleState
	state.Reset(snap)
	feasible := snap.Nodes()
	got := map[string]int64{}
	if st := pl.(framework.PreScorePlugin).PreScore(&state, pod, feasible); st.IsSkip() {
		for _, n := range feasible {
			got[n.Name()] = 0
		}
		return got
	} else if !st.IsSuccess() {
		t.Fatal(st.AsError())
	}
	scores := make([]int64, len(feasible))
	pl.(framework.BatchScorer).ScoreNodes(&state, pod, feasible, scores)
	for i, n := range feasible {
		if s := pl.Score(&state, pod, n); s != scores[i] {
			t.Errorf("node %s: Score %d, ScoreNodes %d", n.Name(), s, scores[i])
		}
	}
	if ext := pl.ScoreExtensions(); ext != nil {
		if st := ext.NormalizeScore(&state, pod, scores); !st.IsSuccess() {
			t.Fatal(st.AsError())
		}
	}
	for i, n := range feasible {
		got[n.Name()] = scores[i]
	}
	return got
}

func ptr[T any](v T) *T { return &v }

func terminating(p *corev1.Pod) { p.Metadata.DeletionTimestamp = timestamppb.Now() }

func fmtName(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }

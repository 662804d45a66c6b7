package scheduler

import (
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/defaultpreemption"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/interpodaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/noderesourcesfit"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podflow/podflow/proto/corev1"
)

// pluginObservations gathers scheduler_plugin_execution_duration_seconds:
// plugin -> extension point -> status -> sample count.
func pluginObservations(t *testing.T, reg *prometheus.Registry) map[string]map[string]map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "scheduler_plugin_execution_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if out[l["plugin"]] == nil {
				out[l["plugin"]] = map[string]map[string]uint64{}
			}
			if out[l["plugin"]][l["extension_point"]] == nil {
				out[l["plugin"]][l["extension_point"]] = map[string]uint64{}
			}
			out[l["plugin"]][l["extension_point"]][l["status"]] += m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

// TestPluginMetricsSampledCycle: a sampled cycle observes every enabled
// plugin at every extension point it implements and ran at (Filter and
// Score only when their PreFilter or PreScore did not skip), once per
// cycle and point however many chunks; PostFilter when no node fits. An
// unsampled cycle observes nothing.
func TestPluginMetricsSampledCycle(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 600 { // more than one filter chunk and many score chunks
		nodes = append(nodes, zoneNode(fmtName("node", i), fmtName("zone", i%3), labels("disk", "ssd")))
	}
	web := podLabels("app", "web")
	c := cacheWith(t, nodes, placed("node-1", 1, web)...)
	s := newTestScheduler(t)
	reg := prometheus.NewRegistry()
	h := NewPluginDurationMetric()
	reg.MustRegister(h)
	s.SetPluginMetrics(h)

	// A pod for which as few plugins as possible skip.
	pod := mkPod("p", "100m", "64Mi", web, image("nginx"), hostPort(8080, "TCP", ""),
		tolerate("k", "Exists", "", "PreferNoSchedule"),
		required(term(expr("disk", "In", "ssd"))), preferred(1, term(expr("zone", "In", "zone-1"))),
		spreadBy(1, "zone", "DoNotSchedule", exists("app")), spreadBy(1, podtopologyspread.LabelHostname, "ScheduleAnyway", exists("app")),
		antiAffinityTo(podtopologyspread.LabelHostname, exists("app")), preferAffinity(5, "zone", exists("app"), false))

	s.samplePercent = 0
	if _, err := s.Schedule(pod, c.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if got := pluginObservations(t, reg); len(got) != 0 {
		t.Fatalf("an unsampled cycle observed %v", got)
	}

	s.samplePercent = 100
	if _, err := s.Schedule(pod, c.Snapshot()); err != nil {
		t.Fatal(err)
	}
	got := pluginObservations(t, reg)
	count := func(pl, point string) (n uint64, skipped bool) {
		for st, v := range got[pl][point] {
			n += v
			skipped = skipped || st == "Skip"
		}
		return n, skipped
	}
	ran := map[string]int{}
	for _, spec := range DefaultPlugins(DefaultWeights()) {
		pl, err := plugins.InTreeRegistry()[spec.Name]()
		if err != nil {
			t.Fatal(err)
		}
		want := func(point string, implements, skipped bool) {
			n, _ := count(spec.Name, point)
			switch {
			case implements && !skipped && n != 1:
				t.Errorf("%s at %s: %d observations, want 1 (%v)", spec.Name, point, n, got[spec.Name])
			case (!implements || skipped) && n != 0:
				t.Errorf("%s at %s: %d observations, want none", spec.Name, point, n)
			}
			if n > 0 {
				ran[point]++
			}
		}
		_, isPreFilter := pl.(framework.PreFilterPlugin)
		want(pointPreFilter, isPreFilter, false)
		_, preFilterSkipped := count(spec.Name, pointPreFilter)
		_, isFilter := pl.(framework.FilterPlugin)
		want(pointFilter, isFilter, preFilterSkipped)
		sc, isScore := pl.(framework.ScorePlugin)
		isScore = isScore && spec.Weight != 0
		_, isPreScore := pl.(framework.PreScorePlugin)
		want(pointPreScore, isScore && isPreScore, false)
		_, preScoreSkipped := count(spec.Name, pointPreScore)
		want(pointScore, isScore, preScoreSkipped)
		want(pointNormalizeScore, isScore && sc.ScoreExtensions() != nil, preScoreSkipped)
		want(pointPostFilter, false, false) // the pod fits
	}
	// The pod was built so that the pod-aware plugins do not skip.
	for _, pl := range []string{podtopologyspread.PodTopologySpreadName, interpodaffinity.InterPodAffinityName} {
		for _, point := range []string{pointFilter, pointScore, pointNormalizeScore} {
			if n, _ := count(pl, point); n != 1 {
				t.Errorf("%s at %s: %d observations, want 1", pl, point, n)
			}
		}
	}
	if ran[pointFilter] < 6 || ran[pointScore] < 5 {
		t.Errorf("plugins observed per point %v: too few ran", ran)
	}

	// No node fits: DefaultPreemption's PostFilter is observed, with its
	// status (nothing to preempt: Unschedulable).
	big := mkPod("big", "64", "1Gi")
	if _, err := s.Schedule(big, c.Snapshot()); err == nil {
		t.Fatal("a 64-cpu pod fitted an 8-cpu node")
	}
	got = pluginObservations(t, reg)
	if n, _ := count(defaultpreemption.DefaultPreemptionName, pointPostFilter); n != 1 {
		t.Errorf("DefaultPreemption at PostFilter: %d observations, want 1 (%v)", n, got[defaultpreemption.DefaultPreemptionName])
	}
	if n, _ := count(noderesourcesfit.NodeResourcesFitName, pointFilter); got[noderesourcesfit.NodeResourcesFitName][pointFilter]["Unschedulable"] != 1 || n != 2 {
		t.Errorf("NodeResourcesFit at Filter %v, want one Success and one Unschedulable", got[noderesourcesfit.NodeResourcesFitName][pointFilter])
	}
}

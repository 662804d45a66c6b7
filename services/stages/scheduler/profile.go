package scheduler

import (
	"fmt"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/balancedallocation"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/defaultpreemption"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/imagelocality"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/interpodaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodeaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodename"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodeports"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/noderesourcesfit"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodeunschedulable"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/tainttoleration"

	"github.com/podflow/podflow/proto/corev1"
)

// PluginSpec enables a plugin in a profile: at every extension point it
// implements, in the profile's order (kube-scheduler's multiPoint). Weight
// multiplies its score (0–100); 0 leaves a score plugin out of scoring
// (its other extension points still run).
type PluginSpec struct {
	Name   string
	Weight int64
}

// DefaultPlugins is kube-scheduler's default profile, as far as podflow
// has its plugins, in its order (filters: NodeUnschedulable, NodeName,
// TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit,
// PodTopologySpread, InterPodAffinity; post-filter: DefaultPreemption),
// with the score weights w.
func DefaultPlugins(w Weights) []PluginSpec {
	return []PluginSpec{
		{Name: nodeunschedulable.NodeUnschedulableName},
		{Name: nodename.NodeNameName},
		{Name: tainttoleration.TaintTolerationName, Weight: w.TaintToleration},
		{Name: nodeaffinity.NodeAffinityName, Weight: w.NodeAffinity},
		{Name: nodeports.NodePortsName},
		{Name: noderesourcesfit.NodeResourcesFitName, Weight: w.LeastAllocated},
		{Name: podtopologyspread.PodTopologySpreadName, Weight: w.PodTopologySpread},
		{Name: interpodaffinity.InterPodAffinityName, Weight: w.InterPodAffinity},
		{Name: balancedallocation.BalancedAllocationName, Weight: w.BalancedAllocation},
		{Name: imagelocality.ImageLocalityName, Weight: w.ImageLocality},
		{Name: defaultpreemption.DefaultPreemptionName},
	}
}

// plugins returns the profile and registry the config selects.
func (c Config) plugins() ([]PluginSpec, framework.Registry) {
	specs, reg := c.Plugins, c.Registry
	if specs == nil {
		specs = DefaultPlugins(c.Weights)
	}
	if reg == nil {
		reg = plugins.InTreeRegistry()
	}
	return specs, reg
}

// validatePlugins checks the profile against the registry.
func (c Config) validatePlugins() error {
	specs, reg := c.plugins()
	seen := map[string]bool{}
	for _, p := range specs {
		if reg[p.Name] == nil {
			return fmt.Errorf("scheduler: plugin %q is not registered", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("scheduler: plugin %q is enabled twice", p.Name)
		}
		seen[p.Name] = true
		if p.Weight < 0 || p.Weight > maxWeight {
			return fmt.Errorf("scheduler: plugin %q weight (%d) must be within 0–%d", p.Name, p.Weight, maxWeight)
		}
	}
	return nil
}

// framework is a built profile: the plugins at each extension point, in
// profile order.
type frameworkImpl struct {
	preFilter  []preFilterEntry
	filter     []filterEntry
	score      []scoreEntry
	postFilter []framework.PostFilterPlugin
}

// filterEntry is a filter plugin and its BatchFilter: its own, or one
// that calls Filter node by node.
type filterEntry struct {
	pl    framework.FilterPlugin
	batch framework.BatchFilter
}

// perNodeFilter is the BatchFilter of a plugin without one.
type perNodeFilter struct{ pl framework.FilterPlugin }

func (f perNodeFilter) FilterNodes(state *framework.CycleState, pod *corev1.Pod, nodes []*framework.NodeInfo, statuses []*framework.Status) {
	for i, n := range nodes {
		if statuses[i] == nil {
			statuses[i] = f.pl.Filter(state, pod, n)
		}
	}
}

type preFilterEntry struct {
	pl     framework.PreFilterPlugin
	filter int // index in framework.filter of the same plugin, or -1
}

type scoreEntry struct {
	name     string
	pl       framework.ScorePlugin
	preScore framework.PreScorePlugin  // or nil
	batch    framework.BatchScorer     // or nil
	ext      framework.ScoreExtensions // or nil
	weight   int64
}

func newFramework(c Config) (*frameworkImpl, error) {
	if err := c.validatePlugins(); err != nil {
		return nil, err
	}
	specs, reg := c.plugins()
	fw := &frameworkImpl{}
	for _, spec := range specs {
		pl, err := reg[spec.Name]()
		if err != nil {
			return nil, fmt.Errorf("scheduler: plugin %q: %w", spec.Name, err)
		}
		filter := -1
		if f, ok := pl.(framework.FilterPlugin); ok {
			filter = len(fw.filter)
			b, ok := pl.(framework.BatchFilter)
			if !ok {
				b = perNodeFilter{f}
			}
			fw.filter = append(fw.filter, filterEntry{pl: f, batch: b})
		}
		if p, ok := pl.(framework.PreFilterPlugin); ok {
			fw.preFilter = append(fw.preFilter, preFilterEntry{pl: p, filter: filter})
		}
		if pf, ok := pl.(framework.PostFilterPlugin); ok {
			fw.postFilter = append(fw.postFilter, pf)
		}
		if sc, ok := pl.(framework.ScorePlugin); ok && spec.Weight != 0 {
			e := scoreEntry{name: spec.Name, pl: sc, ext: sc.ScoreExtensions(), weight: spec.Weight}
			e.preScore, _ = pl.(framework.PreScorePlugin)
			e.batch, _ = pl.(framework.BatchScorer)
			fw.score = append(fw.score, e)
		}
	}
	return fw, nil
}

// runPreFilter runs the PreFilter plugins and returns, appended to
// filters[:0], the filters to run this cycle (those whose PreFilter did
// not skip). A non-nil status is an error or a rejection of every node.
// rec, when not nil, observes each plugin's time.
func (fw *frameworkImpl) runPreFilter(state *framework.CycleState, pod *corev1.Pod, filters []filterEntry, rec *pluginRecorder) ([]filterEntry, *framework.Status) {
	var skip uint64 // bit i: skip fw.filter[i]
	for _, e := range fw.preFilter {
		t0 := rec.now()
		st := e.pl.PreFilter(state, pod)
		if rec != nil {
			rec.observe(e.pl.Name(), pointPreFilter, st.Code(), time.Since(t0))
		}
		switch {
		case st.IsSkip():
			if e.filter >= 0 && e.filter < 64 {
				skip |= 1 << e.filter
			}
		case !st.IsSuccess():
			return filters[:0], st
		}
	}
	filters = filters[:0]
	for i, f := range fw.filter {
		if i >= 64 || skip&(1<<i) == 0 {
			filters = append(filters, f)
		}
	}
	return filters, nil
}

// runPreScore runs the PreScore plugins and returns, appended to
// scorers[:0], the score plugins to run this cycle.
func (fw *frameworkImpl) runPreScore(state *framework.CycleState, pod *corev1.Pod, feasible []*framework.NodeInfo, scorers []scoreEntry, rec *pluginRecorder) ([]scoreEntry, error) {
	scorers = scorers[:0]
	for _, e := range fw.score {
		if e.preScore != nil {
			t0 := rec.now()
			st := e.preScore.PreScore(state, pod, feasible)
			if rec != nil {
				rec.observe(e.name, pointPreScore, st.Code(), time.Since(t0))
			}
			switch {
			case st.IsSkip():
				continue
			case !st.IsSuccess():
				return scorers, st.AsError()
			}
		}
		scorers = append(scorers, e)
	}
	return scorers, nil
}

package scheduler

import (
	"math/rand/v2"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/prometheus/client_golang/prometheus"
)

// Per-plugin timing, as kube-scheduler's
// scheduler_plugin_execution_duration_seconds{plugin, extension_point,
// status}: a sampled cycle (pluginMetricsSamplePercent of them, drawn as
// kube-scheduler draws them) observes, for each plugin, the time it took
// at each extension point it ran at — once per cycle and point: the time
// of all its batch calls (FilterNodes over the chunks, ScoreNodes over
// the chunks) summed, with the most severe code it gave a node (Filter)
// or its status (PreFilter, PreScore, NormalizeScore, PostFilter; Score
// is Success). Unsampled cycles pay one branch per plugin call. The
// filters a PostFilter runs on copies of nodes (the preemption dry run)
// are timed inside PostFilter, not as Filter.

// pluginMetricsSamplePercent is kube-scheduler's sampling rate.
const pluginMetricsSamplePercent = 10

// Extension point labels, kube-scheduler's.
const (
	pointPreFilter      = "PreFilter"
	pointFilter         = "Filter"
	pointPostFilter     = "PostFilter"
	pointPreScore       = "PreScore"
	pointScore          = "Score"
	pointNormalizeScore = "NormalizeScore"
)

// NewPluginDurationMetric returns the scheduler_plugin_execution_duration_seconds
// histogram with kube-scheduler's buckets (10µs, factor 1.5, 20 buckets).
func NewPluginDurationMetric() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "scheduler_plugin_execution_duration_seconds",
		Help:    "Duration for running a plugin at a specific extension point.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 1.5, 20),
	}, []string{"plugin", "extension_point", "status"})
}

// SetPluginMetrics makes the scheduler observe its sampled cycles' plugin
// timings in h (from NewPluginDurationMetric); nil stops it. Like the
// Scheduler, not safe for concurrent use.
func (s *Scheduler) SetPluginMetrics(h *prometheus.HistogramVec) {
	if h == nil {
		s.pm = nil
		return
	}
	s.pm = &pluginRecorder{vec: h, obs: map[pluginMetricKey]prometheus.Observer{}}
}

// pluginRecorder observes plugin timings, with the observers resolved
// once per label set.
type pluginRecorder struct {
	vec *prometheus.HistogramVec
	obs map[pluginMetricKey]prometheus.Observer
}

type pluginMetricKey struct {
	plugin, point string
	code          framework.Code
}

// sample decides whether this cycle records plugin metrics: the
// recorder, or nil.
func (s *Scheduler) sample() *pluginRecorder {
	if s.pm == nil || rand.IntN(100) >= s.samplePercent {
		return nil
	}
	return s.pm
}

// observe records d for a plugin at a point with a code; r may be nil.
func (r *pluginRecorder) observe(plugin, point string, code framework.Code, d time.Duration) {
	if r == nil {
		return
	}
	k := pluginMetricKey{plugin, point, code}
	o := r.obs[k]
	if o == nil {
		o = r.vec.WithLabelValues(plugin, point, code.String())
		r.obs[k] = o
	}
	o.Observe(d.Seconds())
}

// now is time.Now() when r records, else the zero time (not read).
func (r *pluginRecorder) now() time.Time {
	if r == nil {
		return time.Time{}
	}
	return time.Now()
}

// severity orders codes for a batch's Filter status: the most severe a
// plugin gave a node.
func severity(c framework.Code) int {
	switch c {
	case framework.Error:
		return 3
	case framework.UnschedulableAndUnresolvable:
		return 2
	case framework.Unschedulable:
		return 1
	}
	return 0
}

package scheduler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the scheduler's Prometheus metrics, named as kube-scheduler
// names them.
type Metrics struct {
	attemptDuration *prometheus.HistogramVec
}

// RegisterMetrics registers s's metrics in reg: scheduler_pending_pods
// (unschedulable pods waiting for a retry), scheduler_schedule_attempts_total
// {result=scheduled|unschedulable|error}, scheduler_bind_conflicts_total,
// scheduler_scheduling_attempt_duration_seconds{result} and
// scheduler_plugin_execution_duration_seconds{plugin,extension_point,status}
// (sampled cycles, pluginmetrics.go).
func (s *Stage) RegisterMetrics(reg prometheus.Registerer) error {
	plugins := NewPluginDurationMetric()
	m := &Metrics{attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "scheduler_scheduling_attempt_duration_seconds",
		Help:    "Scheduling attempt latency in seconds (scheduling algorithm + binding).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	}, []string{"result"})}
	counter := func(result string, v func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "scheduler_schedule_attempts_total", Help: "Number of attempts to schedule pods, by the result.",
			ConstLabels: prometheus.Labels{"result": result},
		}, v)
	}
	cs := []prometheus.Collector{
		m.attemptDuration, plugins,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "scheduler_pending_pods", Help: "Unschedulable pods waiting for a retry in this replica.",
			ConstLabels: prometheus.Labels{"queue": "unschedulable"},
		}, func() float64 {
			s.qmu.Lock()
			defer s.qmu.Unlock()
			return float64(len(s.waiting))
		}),
		counter("scheduled", func() float64 { return float64(s.Counters.Scheduled.Load()) }),
		counter("unschedulable", func() float64 { return float64(s.Counters.Unschedulable.Load()) }),
		counter("error", func() float64 { return float64(s.Counters.Errors.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "scheduler_bind_conflicts_total", Help: "Bind transactions that lost a race to another replica or a changed node.",
		}, func() float64 { return float64(s.Counters.Conflicts.Load()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.sched.SetPluginMetrics(plugins)
	s.mu.Unlock()
	s.metrics = m
	return nil
}

// observeAttempt records one scheduling attempt's duration.
func (s *Stage) observeAttempt(result string, start time.Time) {
	if s.metrics != nil {
		s.metrics.attemptDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}
}

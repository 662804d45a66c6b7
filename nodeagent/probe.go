package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// probeState is one probe of a running container instance.
type probeState struct {
	kind       ProbeKind
	spec       *corev1.Probe
	next       time.Time
	succ, fail int32
	failing    bool // failure threshold crossed, not yet recovered
}

func (c *ctr) probe(kind ProbeKind) *corev1.Probe {
	switch kind {
	case ProbeStartup:
		return c.spec.GetStartupProbe()
	case ProbeLiveness:
		return c.spec.GetLivenessProbe()
	default:
		return c.spec.GetReadinessProbe()
	}
}

func (c *ctr) resetProbes(now time.Time, second time.Duration) {
	c.probes = c.probes[:0]
	for _, k := range []ProbeKind{ProbeStartup, ProbeLiveness, ProbeReadiness} {
		if p := c.probe(k); p != nil {
			c.probes = append(c.probes, &probeState{kind: k, spec: p,
				next: now.Add(time.Duration(p.GetInitialDelaySeconds()) * second)})
		}
	}
}

// runProbes runs the probes that are due and returns when the next is.
func (w *worker) runProbes(ctx context.Context, now time.Time) time.Time {
	var wake time.Time
	sec := w.d.cfg.SpecSecond
	for _, c := range w.all() { // app containers and sidecars have probes
		for _, p := range c.probes {
			if !c.running() || (p.kind == ProbeStartup) == c.started {
				continue
			}
			if now.Before(p.next) {
				wake = earliest(wake, p.next)
				continue
			}
			period := time.Duration(orDefault(p.spec.GetPeriodSeconds(), 10)) * sec
			pctx, cancel := context.WithTimeout(ctx, time.Duration(orDefault(p.spec.GetTimeoutSeconds(), 1))*sec)
			res, err := w.d.rt.Probe(pctx, w.pod, c.spec, c.id, p.kind, p.spec)
			cancel()
			if ctx.Err() != nil {
				return time.Time{}
			}
			if err != nil {
				res = ProbeResult{Message: err.Error()}
			}
			p.next = w.now().Add(period)
			wake = earliest(wake, p.next)
			if res.OK {
				p.fail, p.succ = 0, p.succ+1
				if p.succ >= orDefault(p.spec.GetSuccessThreshold(), 1) {
					p.failing = false
					w.probeSucceeded(c, p, now)
				}
				continue
			}
			p.succ, p.fail = 0, p.fail+1
			w.rep.Warn(eventsv1.ReasonUnhealthy, fmt.Sprintf("%s probe failed: %s", p.kind, res.Message))
			if p.fail < orDefault(p.spec.GetFailureThreshold(), 3) {
				continue
			}
			if w.probeFailed(ctx, c, p, res.Message) {
				return now // the container was killed: sync again at once
			}
		}
	}
	return wake
}

func (w *worker) probeSucceeded(c *ctr, p *probeState, now time.Time) {
	switch p.kind {
	case ProbeStartup:
		c.started = true
		c.ready = c.probe(ProbeReadiness) == nil
		for _, q := range c.probes {
			if q.kind != ProbeStartup {
				q.next = now.Add(time.Duration(q.spec.GetInitialDelaySeconds()) * w.d.cfg.SpecSecond)
			}
		}
	case ProbeReadiness:
		c.ready = true
	}
}

// probeFailed acts on a probe that crossed its failure threshold; it reports
// whether it killed the container.
func (w *worker) probeFailed(ctx context.Context, c *ctr, p *probeState, msg string) bool {
	name := c.spec.GetName()
	if p.kind == ProbeReadiness {
		c.ready = false
		if !p.failing {
			p.failing = true
			w.rep.ReadinessFailed(name, msg)
		}
		return false
	}
	kind := "liveness"
	if p.kind == ProbeStartup {
		kind = "startup"
	}
	w.rep.Normal(eventsv1.ReasonKilling, fmt.Sprintf("Container %s failed %s probe, will be restarted", name, kind))
	w.rep.Failed(eventsv1.ReasonUnhealthy, fmt.Sprintf("%s probe failed: %s", p.kind, msg), name, false)
	grace := gracePeriod(w.pod, &w.d.cfg)
	if s := p.spec.TerminationGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * w.d.cfg.SpecSecond
	}
	c.killed = true
	w.kill(ctx, []*ctr{c}, grace, func(_ *ctr, ex ContainerExit) { w.onExit(ctx, ex) })
	return true
}

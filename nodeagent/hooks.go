package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// Lifecycle hooks, as kubelet runs them (pkg/kubelet/lifecycle/handlers.go
// and kuberuntime's startContainer and killContainer):
//
//   - postStart runs right after the container started, before anything
//     else of the pod proceeds (a sidecar has not started until it ran).
//     When it fails: a FailedPostStartHook Event ("PostStartHook failed":
//     its message is not recorded, it could hold secrets), the container
//     is killed ("FailedPostStartHook") and restarted by restartPolicy.
//   - preStop runs before the container is sent SIGTERM, inside the grace
//     period: SIGTERM follows when it returns or the grace period ends,
//     whichever is first, and the container gets what is left of the grace
//     (at least kubelet's minimum of 2 seconds). When it fails: a
//     FailedPreStopHook Event ("PreStopHook failed"), and the stop goes on.
//
// exec runs in the container, httpGet is sent to the pod IP (both through
// Runtime.Probe, with the hook's kind), sleep waits. tcpSocket is not a
// handler kubelet runs: it fails as kubelet's "invalid handler".

// Hook kinds, passed to Runtime.Probe when it runs a hook's exec or httpGet.
const (
	HookPostStart ProbeKind = "PostStartHook"
	HookPreStop   ProbeKind = "PreStopHook"
)

// minStopGrace is kubelet's minimumGracePeriodInSeconds, in spec seconds.
const minStopGrace = 2

// runHook runs handler h of container c; it returns kubelet's message for
// a failure, "" when the hook succeeded.
func (w *worker) runHook(ctx context.Context, c *ctr, kind ProbeKind, h *corev1.LifecycleHandler) string {
	name := c.spec.GetName()
	var p *corev1.Probe
	switch {
	case h.GetExec() != nil:
		p = &corev1.Probe{Exec: h.GetExec()}
	case h.GetHttpGet() != nil:
		p = &corev1.Probe{HttpGet: h.GetHttpGet()}
	case h.GetSleep() != nil:
		if !w.sleep(ctx, time.Duration(h.GetSleep().GetSeconds())*w.d.cfg.SpecSecond) {
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %s",
				h.GetSleep().GetSeconds(), name, podRef(w.pod), "container terminated before sleep hook finished")
		}
		return ""
	default:
		return fmt.Sprintf("Cannot run handler: invalid handler: %v", h)
	}
	p.TimeoutSeconds = math.MaxInt32 // bounded by ctx only, as kubelet's hooks
	res, err := w.d.rt.Probe(ctx, w.pod, c.spec, c.id, kind, p)
	if err == nil && res.OK {
		return ""
	}
	if err == nil {
		err = fmt.Errorf("%s", strings.TrimSpace(res.Message))
	}
	if h.GetExec() != nil {
		return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
			h.GetExec().GetCommand(), name, podRef(w.pod), err, res.Message)
	}
	return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v",
		h.GetHttpGet().GetPath(), name, podRef(w.pod), err)
}

// postStart runs c's postStart hook, if any, just after c started; on
// failure c is killed and its exit handled by restartPolicy. It reports
// whether c is still running.
func (w *worker) postStart(ctx context.Context, c *ctr) bool {
	h := c.spec.GetLifecycle().GetPostStart()
	if h == nil {
		return true
	}
	msg := w.runHook(ctx, c, HookPostStart, h)
	if msg == "" || ctx.Err() != nil {
		return true
	}
	w.d.log.Warn("postStart hook failed", "pod", podRef(w.pod), "container", c.spec.GetName(), "msg", msg)
	w.rep.Warn(eventsv1.ReasonFailedPostStartHook, "PostStartHook failed")
	w.rep.Normal(eventsv1.ReasonKilling, "FailedPostStartHook")
	c.killed = true
	w.kill(ctx, []*ctr{c}, gracePeriod(w.pod, &w.d.cfg), func(c *ctr, ex ContainerExit) { w.onExit(ctx, ex) })
	return false
}

// stopping is one container being stopped by kill: its preStop hook runs
// first, then the stop within what is left of the grace period.
type stopping struct {
	c        *ctr
	hookDone chan string // the preStop failure message ("" if fine); nil without a hook
	hookMsg  string      // what hookDone said, if the hook returned within the grace period
	exit     ContainerExit
	err      error
}

// startPreStop starts c's preStop hook, if it has one, bounded by grace.
func (w *worker) startPreStop(ctx context.Context, c *ctr, grace time.Duration) *stopping {
	s := &stopping{c: c}
	h := c.spec.GetLifecycle().GetPreStop()
	if h == nil || grace <= 0 {
		return s
	}
	s.hookDone = make(chan string, 1)
	go func() {
		hctx, cancel := context.WithTimeout(ctx, grace)
		defer cancel()
		msg := w.runHook(hctx, c, HookPreStop, h)
		if errors.Is(hctx.Err(), context.DeadlineExceeded) {
			msg = "" // cut short by the end of the grace period: not a failure, as kubelet
		}
		s.hookDone <- msg
	}()
	return s
}

// finish waits for the preStop hook (until deadline) and stops the
// container within what is left of the grace period.
func (w *worker) finish(ctx context.Context, s *stopping, deadline time.Time) {
	if s.hookDone != nil {
		t := w.d.clock.NewTimer(max(deadline.Sub(w.now()), 0))
		select {
		case s.hookMsg = <-s.hookDone:
		case <-t.C(): // a hook still running when the grace period ends is not reported
		case <-ctx.Done():
		}
		t.Stop()
	}
	left := max(deadline.Sub(w.now()), minStopGrace*w.d.cfg.SpecSecond)
	s.exit, s.err = w.d.rt.StopContainer(ctx, s.c.id, left)
}

// kill stops cs in parallel as kubelet's killContainer does: preStop,
// then SIGTERM, then SIGKILL when grace ends; done receives each exit, in
// the worker's goroutine. It reports false when ctx ended first.
func (w *worker) kill(ctx context.Context, cs []*ctr, grace time.Duration, done func(*ctr, ContainerExit)) bool {
	deadline := w.now().Add(grace)
	ss := make([]*stopping, len(cs))
	for i, c := range cs {
		ss[i] = w.startPreStop(ctx, c, grace)
	}
	return w.finishAll(ctx, ss, deadline, done)
}

// finishAll finishes ss in parallel and records what happened.
func (w *worker) finishAll(ctx context.Context, ss []*stopping, deadline time.Time, done func(*ctr, ContainerExit)) bool {
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() { w.finish(ctx, s, deadline) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false
	}
	for _, s := range ss {
		if s.hookMsg != "" {
			w.d.log.Warn("preStop hook failed", "pod", podRef(w.pod), "container", s.c.spec.GetName(), "msg", s.hookMsg)
			w.rep.Warn(eventsv1.ReasonFailedPreStopHook, "PreStopHook failed")
		}
		if s.err != nil {
			w.d.log.Warn("stop container", "pod", podRef(w.pod), "container", s.c.spec.GetName(), "err", s.err)
			s.exit = ContainerExit{ExitCode: 137, FinishedAt: w.now()}
		}
		s.exit.ID = s.c.id
		done(s.c, s.exit)
	}
	return true
}

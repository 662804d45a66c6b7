package nodeagent

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// reporter is one pod's status reporter and outbox: kubelet's status
// manager and event recorder for a single pod.
//
// The worker records Kubernetes Events (Normal, Warning) and queues
// lifecycle events (Emit, Failed, ReadinessFailed) as things happen. Flush
// takes the pod's current status: when it changed, or anything was recorded
// or queued, it numbers one PodStatusReport (carrying the status and the
// recorded Events) with the pod's next seq, puts it in the outbox followed by
// the queued events and the events the status transition implies (PodRunning,
// PodReady, PodNotReady, the final PodFailed), then publishes the outbox in
// order. The steps right behind the report (eventsv1.Steps: sandbox, pull,
// start, running, ready — progress no stage consumes) travel inside it
// (PodStatusReport.steps), each with its own id and the time it happened,
// so a pod's start costs the stream one message instead of six; PodReady
// and PodNotReady, which restate the report's Ready condition, always do,
// with the events before them (eventsv1.ReadinessSteps). A failed publish keeps the rest of the outbox,
// unchanged (same ids), for the next Flush.
//
// Every method is called from the pod's worker goroutine only, except
// Reported, which is safe for concurrent use.
type reporter struct {
	d   *workerDeps
	pod *corev1.Pod // its uid is the pod's (uid)

	seq int64 // the last seq used; see nextSeq
	// last is the last status flushed, encoded: what Flush compares the
	// next one with, and what Reported decodes. Its objects (a PodStatus,
	// its conditions and container statuses, ~1.2 KB a pod) are not kept;
	// its encoding is about half that.
	last atomic.Pointer[[]byte]

	// What the reported statuses have said so far, for deriveEvents.
	wasRunning bool
	wasReady   bool
	finalSent  bool
	notReady   bool // a PodNotReady is queued in events

	records []*eventsv1.EventRecord
	events  []*eventsv1.Envelope // payload only; ids assigned at flush
	outbox  []*eventsv1.Envelope // built, not yet acknowledged
}

// podFailure is why a pod failed, for its final PodFailed.
type podFailure struct {
	reason, message, container string
}

func newReporter(d *workerDeps, pod *corev1.Pod) *reporter {
	return &reporter{d: d, pod: pod}
}

// uid is the pod's uid: read from the pod, as a field of its own would
// take the reporter past 128 bytes.
func (r *reporter) uid() string { return r.pod.GetMetadata().GetUid() }

// Reported returns the last status flushed (nil before the first), a
// PodStatus of the caller's own.
func (r *reporter) Reported() *corev1.PodStatus {
	b := r.last.Load()
	if b == nil {
		return nil
	}
	st := &corev1.PodStatus{}
	if err := st.UnmarshalVT(*b); err != nil {
		return nil // Flush encoded it
	}
	return st
}

// Normal records a Normal Event for the next report.
func (r *reporter) Normal(reason, msg string) {
	r.records = append(r.records, &eventsv1.EventRecord{Type: "Normal", Reason: reason, Message: msg})
}

// Warn records a Warning Event for the next report.
func (r *reporter) Warn(reason, msg string) {
	r.records = append(r.records, &eventsv1.EventRecord{Type: "Warning", Reason: reason, Message: msg})
}

// Emit queues a lifecycle event (payload only) to follow the next report,
// stamped with the time it happened.
func (r *reporter) Emit(env *eventsv1.Envelope) {
	env.Time = timestamppb.New(r.now())
	r.events = append(r.events, env)
}

// Failed queues a PodFailed.
func (r *reporter) Failed(reason, msg, container string, final bool) {
	r.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodFailed{PodFailed: &eventsv1.PodFailed{
		Reason: reason, Message: msg, Container: container, Final: final}}})
}

// ReadinessFailed queues the PodNotReady of a container whose readiness
// probe crossed its failure threshold; the report's own transition to not
// ready then adds no second one.
func (r *reporter) ReadinessFailed(container, msg string) {
	r.notReady = true
	r.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodNotReady{PodNotReady: &eventsv1.PodNotReady{
		Reason: eventsv1.ReasonUnhealthy, Message: "Readiness probe failed: " + msg, Container: container}}})
}

// Deleted queues the pod's last event, PodDeleted, behind everything else.
// Its id is one per pod, however often the pod is deleted.
func (r *reporter) Deleted() {
	seq := r.nextSeq()
	del := r.envelope(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodDeleted{PodDeleted: &eventsv1.PodDeleted{}}}, seq, 0)
	del.Id = fmt.Sprintf("uid/%s/PodDeleted", r.uid())
	r.outbox = append(r.outbox, del)
}

func (r *reporter) now() time.Time { return r.d.clock.Now() }

// nextSeq returns the pod's next sequence number. It is at least the wall
// clock in nanoseconds, so a restarted agent continues above its predecessor.
func (r *reporter) nextSeq() int64 {
	r.seq = max(r.seq+1, r.now().UnixNano())
	return r.seq
}

// envelope fills env's routing fields. Its id is eventsv1.EventID's
// ("uid/<uid>/<type>/g<seq>/a1"); the n-th (n > 0) event of one type after
// one report gets "/<n>" appended, so that it is not deduplicated away (two
// containers starting in one step, for instance).
func (r *reporter) envelope(env *eventsv1.Envelope, seq int64, n int) *eventsv1.Envelope {
	md := r.pod.GetMetadata()
	env.PodUid, env.Namespace, env.PodName = r.uid(), md.GetNamespace(), md.GetName()
	env.NodeName, env.Stage, env.Replica = r.d.cfg.NodeName, Stage, r.d.cfg.NodeName
	if env.Time == nil { // a step stamped when it happened (Emit) keeps its time
		env.Time = timestamppb.New(r.now())
	}
	env.Attempt, env.Generation = 1, seq
	env.Id = eventsv1.EventID(env)
	if n > 0 {
		env.Id += "/" + strconv.Itoa(n)
	}
	return env
}

// Flush reports st: a PodStatusReport followed by the specific events when
// anything changed, then it publishes the outbox in order. final is why the
// pod failed, reported once with the first Failed status; nil when a Failed
// status is not the pod's end to report (it is being deleted). Flush
// returns when to retry a failed publish (zero: nothing pending).
func (r *reporter) Flush(ctx context.Context, st *corev1.PodStatus, final *podFailure) time.Time {
	r.deriveEvents(st, final)
	enc, err := st.MarshalVT()
	last := r.last.Load()
	if len(r.records) > 0 || len(r.events) > 0 || err != nil || last == nil || !bytes.Equal(enc, *last) {
		seq := r.nextSeq()
		report := &eventsv1.PodStatusReport{Status: st, Seq: seq, Events: r.records}
		r.outbox = append(r.outbox, r.envelope(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodStatusReport{
			PodStatusReport: report}}, seq, 0))
		// The events that follow carry the report's seq. The report
		// carries (eventsv1.Steps) every event up to the last PodReady or
		// PodNotReady, which restate its own Ready condition, and the
		// steps right behind those (progress no stage consumes), each with
		// its own id and time, so the stream stores one message for them
		// all; the events after are messages of their own. The order of
		// the events is unchanged (eventsv1.Unfold gives it back).
		carried := 0
		for i, e := range r.events {
			if eventsv1.ReadinessSteps[e.Type()] {
				carried = i + 1
			}
		}
		for carried < len(r.events) && eventsv1.Steps[r.events[carried].Type()] {
			carried++
		}
		seen := map[eventsv1.Type]int{}
		for i, e := range r.events {
			env := r.envelope(e, seq, seen[e.Type()])
			seen[e.Type()]++
			if i < carried {
				report.Steps = append(report.Steps, &eventsv1.Envelope{Id: env.Id, Time: env.Time, Payload: env.Payload})
				continue
			}
			r.outbox = append(r.outbox, env)
		}
		r.records, r.events, r.notReady = nil, nil, false
		if err == nil {
			r.last.Store(&enc)
		}
	}
	for len(r.outbox) > 0 {
		pctx, cancel := publishContext(ctx, r.d.cfg.PublishTimeout)
		err := r.d.pub.Publish(pctx, r.outbox[0])
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return time.Time{}
			}
			r.d.log.Warn("publish", "pod", podRef(r.pod), "id", r.outbox[0].GetId(), "err", err)
			return r.now().Add(r.d.cfg.PublishRetry)
		}
		r.outbox[0] = nil
		r.outbox = r.outbox[1:]
	}
	return time.Time{}
}

// deriveEvents queues the events that follow from a status transition.
func (r *reporter) deriveEvents(st *corev1.PodStatus, final *podFailure) {
	if st.GetPhase() == "Running" && !r.wasRunning {
		r.wasRunning = true
		r.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodRunning{PodRunning: &eventsv1.PodRunning{
			PodIp: st.GetPodIp(), HostIp: st.GetHostIp()}}})
	}
	ready := podrules.PodCondition(st, podrules.PodReady).GetStatus() == podrules.ConditionTrue
	switch {
	case ready && !r.wasReady:
		r.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodReady{PodReady: &eventsv1.PodReady{}}})
	case !ready && r.wasReady && !r.notReady:
		r.Emit(&eventsv1.Envelope{Payload: &eventsv1.Envelope_PodNotReady{PodNotReady: &eventsv1.PodNotReady{
			Reason: eventsv1.ReasonContainersNotReady, Message: podrules.PodCondition(st, podrules.PodReady).GetMessage()}}})
	}
	r.wasReady = ready
	if st.GetPhase() == "Failed" && !r.finalSent && final != nil {
		r.finalSent = true
		r.Failed(final.reason, final.message, final.container, true)
	}
}

// publishContext bounds one publish by timeout when ctx has no deadline.
func publishContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

func podRef(pod *corev1.Pod) string {
	md := pod.GetMetadata()
	return fmt.Sprintf("%s_%s(%s)", md.GetName(), md.GetNamespace(), md.GetUid())
}

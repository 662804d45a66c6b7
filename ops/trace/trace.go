// Package trace rebuilds a pod's lifecycle from the events of the JetStream
// stream alone: which stage handled each step, on which replica, when, how
// long the event waited in the stream and how long the stage took,
// redeliveries and scheduler conflicts, and where the pod is now and why.
// It is pure: the caller reads the stream and hands the events in.
package trace

import (
	"fmt"
	"strings"
	"time"

	"github.com/podflow/podflow/proto/eventsv1"
)

// Record is one event read from the stream.
type Record struct {
	Env    *eventsv1.Envelope
	Stored time.Time // when the stream stored it
	Seq    uint64    // stream sequence
}

// Entry is one line of a timeline.
type Entry struct {
	Time         time.Time     `json:"time"`
	Elapsed      time.Duration `json:"elapsed"`
	Stage        string        `json:"stage"`
	Replica      string        `json:"replica"`
	Event        string        `json:"event"`
	Waited       time.Duration `json:"waited,omitempty"` // input event stored → handling started
	Took         time.Duration `json:"took,omitempty"`   // handling started → ended
	Redeliveries int32         `json:"redeliveries,omitempty"`
	Detail       string        `json:"detail,omitempty"`
	Seq          uint64        `json:"seq"`
	// Repeats counts the identical entries Fold folded into this one
	// (the scheduler's retries of a pod that fits nowhere), the last at
	// Last.
	Repeats int        `json:"repeats,omitempty"`
	Last    *time.Time `json:"last,omitempty"`
}

// Fold folds each run of consecutive entries of one stage, event and
// detail (a retry that changed nothing) into its first, with Repeats and
// Last: a stuck pod's waterfall is a row per step, not per retry.
func Fold(entries []Entry) []Entry {
	out := make([]Entry, 0, len(entries))
	for _, e := range entries {
		if n := len(out); n > 0 {
			p := &out[n-1]
			if p.Stage == e.Stage && p.Event == e.Event && p.Detail == e.Detail {
				if p.Repeats == 0 {
					p.Repeats = 1
				}
				p.Repeats++
				t := e.Time
				p.Last = &t
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

// Timeline is a pod's trace.
type Timeline struct {
	Namespace   string  `json:"namespace"`
	Name        string  `json:"name"`
	UID         string  `json:"uid,omitempty"`
	RequestID   string  `json:"requestId,omitempty"`
	Traceparent string  `json:"traceparent,omitempty"`
	Entries     []Entry `json:"entries"`
	// Where is the stage the pod is at (or stopped in), Verdict what that
	// means, in Kubernetes' words.
	Where   string `json:"where"`
	Verdict string `json:"verdict"`
}

// Build returns the timeline of the latest incarnation of the pod among
// recs (in stream order): the one of the last PodRequested, or, without
// one, of the last pod uid seen.
func Build(ns, name string, recs []Record, uidOf func(requestID string) string) *Timeline {
	tl := &Timeline{Namespace: ns, Name: name}
	for _, r := range recs {
		// An incarnation starts with its request: PodRequested on the bus
		// front door, PodAuthorized from the HTTPS one (which authorizes in
		// process and publishes no PodRequested).
		if starts := r.Env.GetPodRequested() != nil || (r.Env.GetPodAuthorized() != nil && r.Env.GetRequestId() != tl.RequestID); starts {
			tl.RequestID, tl.UID = r.Env.GetRequestId(), ""
		}
		if u := r.Env.GetPodUid(); u != "" && (tl.RequestID == "" || r.Env.GetRequestId() == tl.RequestID) {
			tl.UID = u
		}
	}
	if tl.UID == "" && tl.RequestID != "" && uidOf != nil {
		tl.UID = uidOf(tl.RequestID)
	}
	stored := map[string]time.Time{}
	var first time.Time
	for _, r := range recs {
		e := r.Env
		mine := (tl.RequestID != "" && e.GetRequestId() == tl.RequestID) || (tl.UID != "" && e.GetPodUid() == tl.UID)
		if !mine {
			continue
		}
		stored[e.GetId()] = r.Stored
		t := e.GetTime().AsTime()
		if first.IsZero() {
			first = t
			tl.Traceparent = e.GetTraceparent()
		}
		en := Entry{
			Time: t, Elapsed: t.Sub(first), Stage: e.GetStage(), Replica: e.GetReplica(), Event: string(e.Type()),
			Redeliveries: e.GetRedeliveries(), Detail: Detail(e), Seq: r.Seq,
		}
		if hs, he := e.GetHandledStart(), e.GetHandledEnd(); hs != nil && he != nil {
			en.Took = he.AsTime().Sub(hs.AsTime())
			if in, ok := stored[e.GetCausedBy()]; ok {
				en.Waited = hs.AsTime().Sub(in)
			}
		}
		tl.Entries = append(tl.Entries, callEntries(e, first, r.Seq)...)
		tl.Entries = append(tl.Entries, en)
		tl.Where, tl.Verdict = verdict(e, tl.Where, tl.Verdict)
	}
	return tl
}

// admissionCalls are the webhook calls and policy evaluations an
// admission outcome carries.
func admissionCalls(e *eventsv1.Envelope) []*eventsv1.AdmissionCall {
	if a := e.GetPodAdmitted(); a != nil {
		return a.GetCalls()
	}
	return e.GetPodRejected().GetCalls()
}

// callEntries are admission's sub-steps: one entry per webhook call or
// policy evaluation, before the outcome they led to, each with its
// latency (Took) and verdict.
func callEntries(e *eventsv1.Envelope, first time.Time, seq uint64) []Entry {
	calls := admissionCalls(e)
	out := make([]Entry, 0, len(calls))
	for _, c := range calls {
		t := c.GetStart().AsTime()
		out = append(out, Entry{Time: t, Elapsed: t.Sub(first), Stage: e.GetStage(), Replica: e.GetReplica(), Event: "  " + c.GetPlugin(),
			Took: time.Duration(c.GetLatencyNanos()), Detail: CallDetail(c), Seq: seq})
	}
	return out
}

// CallDetail is a one-line summary of an admission call: the webhook or
// policy, its configuration, the verdict and the message.
func CallDetail(c *eventsv1.AdmissionCall) string {
	s := c.GetName()
	if s == "" {
		s = "(policies)"
	}
	if c.GetConfiguration() != "" {
		s += " (" + c.GetConfiguration() + ")"
	}
	s += ": " + c.GetVerdict()
	if c.GetMessage() != "" {
		s += ": " + c.GetMessage()
	}
	return s
}

// verdict updates where the pod is after event e.
func verdict(e *eventsv1.Envelope, where, v string) (string, string) {
	switch p := e.PayloadMessage().(type) {
	case *eventsv1.PodRequested:
		return "api", "requested"
	case *eventsv1.PodAuthorized:
		return "admission", "authorized; waiting for admission"
	case *eventsv1.PodAdmitted:
		return "persistence", "admitted; waiting to be stored"
	case *eventsv1.PodPersisted:
		return "scheduler", "stored (Pending); waiting for a node"
	case *eventsv1.PodUnschedulable:
		return "scheduler", "Pending: FailedScheduling: " + p.GetMessage()
	case *eventsv1.PodScheduled:
		return "nodeagent", "scheduled to " + p.GetNodeName() + "; ContainerCreating"
	case *eventsv1.PodRejected:
		return e.GetStage(), fmt.Sprintf("rejected by %s: %d %s: %s", e.GetStage(), p.GetStatus().GetCode(), p.GetStatus().GetReason(), p.GetStatus().GetMessage())
	case *eventsv1.PodFailed:
		return "nodeagent", p.GetReason() + ": " + p.GetMessage()
	case *eventsv1.PodRunning:
		return "nodeagent", "Running; waiting for readiness"
	case *eventsv1.PodReady:
		return "endpoints", "Running and Ready"
	case *eventsv1.PodNotReady:
		return "nodeagent", "Running, not Ready: " + p.GetReason()
	case *eventsv1.EndpointsUpdated:
		if p.GetAdded() {
			return "endpoints", "Running and Ready; in service/" + p.GetService()
		}
		if v == "deleted" || v == "" {
			return where, v // a deleted pod leaving its Services stays deleted
		}
		return "endpoints", v + "; left service/" + p.GetService()
	case *eventsv1.PodDeleteRequested:
		return "nodeagent", "Terminating"
	case *eventsv1.PodDeleted:
		return "status", "deleted"
	case *eventsv1.ContainerExited:
		if p.GetExitCode() != 0 {
			return "nodeagent", fmt.Sprintf("container %s exited %d (%s)", p.GetContainer(), p.GetExitCode(), p.GetReason())
		}
	}
	return where, v
}

// Detail is a one-line summary of an event for people.
func Detail(e *eventsv1.Envelope) string {
	switch p := e.PayloadMessage().(type) {
	case *eventsv1.PodScheduled:
		s := "node=" + p.GetNodeName()
		if p.GetConflicts() > 0 {
			s += fmt.Sprintf(" conflicts=%d", p.GetConflicts())
		}
		if p.GetFilterNanos()+p.GetScoreNanos()+p.GetBindNanos() > 0 {
			s += fmt.Sprintf(" filter=%s score=%s bind=%s", time.Duration(p.GetFilterNanos()), time.Duration(p.GetScoreNanos()), time.Duration(p.GetBindNanos()))
		}
		return s
	case *eventsv1.PodUnschedulable:
		return p.GetMessage()
	case *eventsv1.PodRejected:
		return fmt.Sprintf("%d %s: %s", p.GetStatus().GetCode(), p.GetStatus().GetReason(), p.GetStatus().GetMessage())
	case *eventsv1.PodAdmitted:
		return strings.Join(p.GetMutations(), "; ")
	case *eventsv1.PodSandboxReady:
		return "ip=" + p.GetPodIp()
	case *eventsv1.ImagePulling:
		return p.GetImage()
	case *eventsv1.ImagePulled:
		if p.GetAlreadyPresent() {
			return p.GetImage() + " (present)"
		}
		return p.GetImage()
	case *eventsv1.ContainerStarted:
		if p.GetRestartCount() > 0 {
			return fmt.Sprintf("%s restart=%d", p.GetContainer(), p.GetRestartCount())
		}
		return p.GetContainer()
	case *eventsv1.ContainerExited:
		return fmt.Sprintf("%s exit=%d %s", p.GetContainer(), p.GetExitCode(), p.GetReason())
	case *eventsv1.PodRunning:
		return "ip=" + p.GetPodIp()
	case *eventsv1.PodFailed:
		return p.GetReason() + ": " + p.GetMessage()
	case *eventsv1.PodNotReady:
		return p.GetReason() + ": " + p.GetMessage()
	case *eventsv1.EndpointsUpdated:
		verb := "left"
		if p.GetAdded() {
			verb = "joined"
		}
		return fmt.Sprintf("%s service/%s (%d ready)", verb, p.GetService(), p.GetReadyEndpoints())
	case *eventsv1.PodStatusReport:
		return "phase=" + p.GetStatus().GetPhase()
	case *eventsv1.DeadLetter:
		return fmt.Sprintf("%s after %d deliveries: %s", p.GetCode(), p.GetDeliveries(), p.GetError())
	}
	return ""
}

// Verdict says where a pod is after event e alone, and what that means;
// where is "" for events that do not move a pod (status reports, pulls).
func Verdict(e *eventsv1.Envelope) (where, what string) { return verdict(e, "", "") }

// Step is where a pod is after event e, when it was at where with verdict
// what before it (the fold Build does): an event that says nothing new
// of the pod (a deleted pod leaving its Services) keeps the pod where it
// was.
func Step(e *eventsv1.Envelope, where, what string) (string, string) { return verdict(e, where, what) }

// Settled reports whether a verdict ends the pod's journey: Running and
// Ready, rejected, or deleted. A pod not settled is waiting somewhere.
func Settled(verdict string) bool {
	return strings.HasPrefix(verdict, "Running and Ready") || strings.HasPrefix(verdict, "rejected") || verdict == "deleted"
}

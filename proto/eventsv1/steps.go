package eventsv1

// Steps are the event types a node agent carries inside its
// PodStatusReport (PodStatusReport.steps) instead of publishing each as a
// message of its own: progress no stage consumes, only the readers of the
// stream (`podflow trace`, the console, the bench) show it. A report
// carries the steps right behind it, in order; and since PodReady and
// PodNotReady restate the Ready condition of the status the report carries
// (the endpoints stage follows it from the store, not from them), a report
// always carries them (ReadinessSteps), with whatever precedes them since
// the report (a ContainerExited), so that Unfold gives the events back in
// the order they happened.
var Steps = map[Type]bool{
	"PodSandboxReady":  true,
	"ImagePulling":     true,
	"ImagePulled":      true,
	"ContainerStarted": true,
	"PodRunning":       true,
	"PodReady":         true,
	"PodNotReady":      true,
}

// ReadinessSteps are the Steps a report always carries, with the events
// before them.
var ReadinessSteps = map[Type]bool{
	"PodReady":    true,
	"PodNotReady": true,
}

// Unfold returns the events one stored message stands for: env itself and,
// for a PodStatusReport, the steps it carries, each a whole envelope again
// (its own id, time and payload; the rest of its routing copied from the
// report), in the order they were published. The steps are new envelopes;
// env is not changed.
func Unfold(env *Envelope) []*Envelope {
	steps := env.GetPodStatusReport().GetSteps()
	if len(steps) == 0 {
		return []*Envelope{env}
	}
	out := make([]*Envelope, 0, 1+len(steps))
	out = append(out, env)
	for _, s := range steps {
		u := &Envelope{
			Id: s.GetId(), Time: s.GetTime(), Payload: s.Payload,
			PodUid: env.GetPodUid(), RequestId: env.GetRequestId(), Namespace: env.GetNamespace(), PodName: env.GetPodName(),
			NodeName: env.GetNodeName(), Stage: env.GetStage(), Replica: env.GetReplica(), Attempt: env.GetAttempt(),
			Generation: env.GetGeneration(), Traceparent: env.GetTraceparent(),
		}
		if u.Time == nil {
			u.Time = env.GetTime()
		}
		out = append(out, u)
	}
	return out
}

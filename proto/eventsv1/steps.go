package eventsv1

// Steps are the event types a node agent carries inside its
// PodStatusReport (PodStatusReport.steps) instead of publishing each as a
// message of its own: progress no stage consumes, only the readers of the
// stream (`podflow trace`, the console, the bench) show it.
var Steps = map[Type]bool{
	"PodSandboxReady":  true,
	"ImagePulling":     true,
	"ImagePulled":      true,
	"ContainerStarted": true,
	"PodRunning":       true,
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

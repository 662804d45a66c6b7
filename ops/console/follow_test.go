package console

import (
	"context"
	"testing"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/ops/client"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// The console follows the real events stream: a pod whose PodRunning came
// as a step of its node's PodStatusReport is seen Running, not still
// ContainerCreating from its PodScheduled.
func TestFollowSeesSteps(t *testing.T) {
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "admin")
	bustest.Provision(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	sched, _ := bus.NewEnvelope(&eventsv1.PodScheduled{NodeName: "n1"})
	running, _ := bus.NewEnvelope(&eventsv1.PodRunning{PodIp: "10.244.0.9"})
	report, _ := bus.NewEnvelope(&eventsv1.PodStatusReport{Seq: 1, Steps: []*eventsv1.Envelope{
		{Id: "uid/u1/PodRunning/g1/a1", Payload: running.Payload}}})
	for i, e := range []*eventsv1.Envelope{sched, report} {
		e.Id, e.PodUid, e.Namespace, e.PodName, e.NodeName = []string{"s", "r"}[i], "u1", "default", "web", "n1"
		if _, err := conn.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	s := &BusSource{Sess: &client.Session{Bus: conn}}
	if err := s.follow(ctx); err != nil {
		t.Fatal(err)
	}
	if w := s.seen["default/web"]; w.Stage != "nodeagent" || w.Verdict != "Running; waiting for readiness" {
		t.Errorf("the console sees web at %q: %q, want Running", w.Stage, w.Verdict)
	}
}

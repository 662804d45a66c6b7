package trace

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

func env(id, causedBy, stage, req, uid string, at time.Time, start, end time.Duration, payload proto.Message) Record {
	e := &eventsv1.Envelope{Id: id, CausedBy: causedBy, Stage: stage, Replica: stage + "-1", RequestId: req, PodUid: uid, Time: timestamppb.New(at)}
	if err := bus.SetPayload(e, payload); err != nil {
		panic(err)
	}
	if end > 0 {
		e.HandledStart, e.HandledEnd = timestamppb.New(at.Add(-end+start)), timestamppb.New(at)
	}
	return Record{Env: e, Stored: at}
}

func TestBuild(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	recs := []Record{
		// An older incarnation of the same name: ignored.
		env("old", "", "client", "r0", "", t0.Add(-time.Hour), 0, 0, &eventsv1.PodRequested{}),
		env("a", "", "client", "r1", "", t0, 0, 0, &eventsv1.PodRequested{}),
		env("b", "a", "api", "r1", "", t0.Add(3*ms), 0, 1*ms, &eventsv1.PodAuthorized{}),
		env("c", "b", "admission", "r1", "", t0.Add(5*ms), 0, 1*ms, &eventsv1.PodAdmitted{}),
		env("d", "c", "persistence", "r1", "u1", t0.Add(10*ms), 0, 2*ms, &eventsv1.PodPersisted{}),
		env("e", "d", "scheduler", "r1", "u1", t0.Add(20*ms), 0, 5*ms, &eventsv1.PodUnschedulable{
			Message: "0/3 nodes are available: 3 Insufficient cpu."}),
	}
	recs[5].Env.Redeliveries = 2
	tl := Build("default", "web", recs, nil)
	if tl.UID != "u1" || tl.RequestID != "r1" || len(tl.Entries) != 5 {
		t.Fatalf("uid %q request %q entries %d", tl.UID, tl.RequestID, len(tl.Entries))
	}
	api := tl.Entries[1]
	if api.Stage != "api" || api.Took != ms || api.Waited != 2*ms || api.Elapsed != 3*ms {
		t.Fatalf("api entry %+v", api)
	}
	sched := tl.Entries[4]
	if sched.Redeliveries != 2 || sched.Waited != 5*ms {
		t.Fatalf("scheduler entry %+v", sched)
	}
	if tl.Where != "scheduler" || !strings.Contains(tl.Verdict, "FailedScheduling: 0/3 nodes are available: 3 Insufficient cpu.") {
		t.Fatalf("where %q verdict %q", tl.Where, tl.Verdict)
	}
}

func TestVerdictRejected(t *testing.T) {
	t0 := time.Now()
	recs := []Record{
		env("a", "", "client", "r1", "", t0, 0, 0, &eventsv1.PodRequested{}),
		env("b", "a", "api", "r1", "", t0, 0, 1, &eventsv1.PodRejected{
			Status: &corev1.Status{Code: 403, Reason: "Forbidden", Message: "pods is forbidden"}}),
	}
	tl := Build("default", "x", recs, nil)
	if tl.Where != "api" || tl.Verdict != "rejected by api: 403 Forbidden: pods is forbidden" {
		t.Fatalf("%q %q", tl.Where, tl.Verdict)
	}
}

// A pod created over HTTPS has no PodRequested: its trace starts at
// PodAuthorized.
func TestBuildFromHTTPS(t *testing.T) {
	t0 := time.Now()
	recs := []Record{
		env("b", "", "api", "r9", "", t0, 0, 0, &eventsv1.PodAuthorized{}),
		env("c", "b", "admission", "r9", "", t0.Add(time.Millisecond), 0, 1, &eventsv1.PodAdmitted{}),
		env("d", "c", "persistence", "r9", "u9", t0.Add(2*time.Millisecond), 0, 1, &eventsv1.PodPersisted{}),
	}
	tl := Build("default", "web", recs, nil)
	if len(tl.Entries) != 3 || tl.RequestID != "r9" || tl.UID != "u9" || tl.Where != "scheduler" {
		t.Fatalf("entries %d request %q uid %q where %q", len(tl.Entries), tl.RequestID, tl.UID, tl.Where)
	}
}

// TestAdmissionCallsAreSubSteps: each webhook call and policy evaluation
// an admission outcome carries is an entry of its own before it, with its
// latency and verdict; a rejection names the webhook.
func TestAdmissionCallsAreSubSteps(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	denial := `admission webhook "labels.example.com" denied the request: label forbidden=yes is not allowed`
	recs := []Record{
		env("b", "", "api", "r1", "", t0, 0, 1*ms, &eventsv1.PodAuthorized{}),
		env("c", "b", "admission", "r1", "", t0.Add(9*ms), 0, 8*ms, &eventsv1.PodRejected{
			Status: &corev1.Status{Code: 400, Reason: "BadRequest", Message: denial},
			Calls: []*eventsv1.AdmissionCall{
				{Plugin: "MutatingAdmissionWebhook", Name: "inject.example.com", Configuration: "injector", Start: timestamppb.New(t0.Add(2 * ms)),
					LatencyNanos: int64(2 * ms), Verdict: "Patched"},
				{Plugin: "ValidatingAdmissionWebhook", Name: "labels.example.com", Configuration: "checks", Start: timestamppb.New(t0.Add(5 * ms)),
					LatencyNanos: int64(3 * ms), Verdict: "Denied", Message: "label forbidden=yes is not allowed"},
			}}),
	}
	tl := Build("default", "x", recs, nil)
	if len(tl.Entries) != 4 {
		t.Fatalf("entries: %+v", tl.Entries)
	}
	inj, deny := tl.Entries[1], tl.Entries[2]
	if inj.Event != "  MutatingAdmissionWebhook" || inj.Took != 2*ms || inj.Elapsed != 2*ms || inj.Detail != "inject.example.com (injector): Patched" {
		t.Fatalf("the mutating call: %+v", inj)
	}
	if deny.Took != 3*ms || deny.Detail != "labels.example.com (checks): Denied: label forbidden=yes is not allowed" || deny.Stage != "admission" {
		t.Fatalf("the validating call: %+v", deny)
	}
	if tl.Entries[3].Event != "PodRejected" || tl.Verdict != "rejected by admission: 400 BadRequest: "+denial {
		t.Fatalf("outcome %+v, verdict %q", tl.Entries[3], tl.Verdict)
	}
}

// A node's PodReady travels inside its PodStatusReport; the endpoints
// stage, which follows the stored status and consumes no event, announces
// the pod joining its Service caused by that step: the timeline shows the
// step, the join (waited for from the report's storing), and the pod
// Running and Ready in the Service.
func TestBuildReadyFromReportStep(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	ready := &eventsv1.Envelope{PodUid: "u1", Generation: 9, Attempt: 1, Payload: &eventsv1.Envelope_PodReady{PodReady: &eventsv1.PodReady{}}}
	readyID := eventsv1.EventID(ready)
	report := &eventsv1.Envelope{Id: "report", PodUid: "u1", RequestId: "r1", Stage: "nodeagent", Generation: 9, Attempt: 1, Time: timestamppb.New(t0.Add(10 * ms)),
		Payload: &eventsv1.Envelope_PodStatusReport{PodStatusReport: &eventsv1.PodStatusReport{Seq: 9, Status: &corev1.PodStatus{Phase: "Running"}, Steps: []*eventsv1.Envelope{
			{Id: "running", Payload: &eventsv1.Envelope_PodRunning{PodRunning: &eventsv1.PodRunning{}}},
			{Id: readyID, Payload: ready.Payload},
		}}}}
	recs := []Record{env("a", "", "persistence", "r1", "u1", t0, 0, 0, &eventsv1.PodPersisted{})}
	for _, e := range eventsv1.Unfold(report) {
		recs = append(recs, Record{Env: e, Stored: t0.Add(12 * ms)})
	}
	recs = append(recs, env("joined", readyID, "endpoints", "r1", "u1", t0.Add(20*ms), 0, 3*ms, &eventsv1.EndpointsUpdated{Service: "web", Added: true, ReadyEndpoints: 1}))
	tl := Build("default", "web", recs, nil)
	var events []string
	for _, e := range tl.Entries {
		events = append(events, e.Event)
	}
	if want := "PodPersisted PodStatusReport PodRunning PodReady EndpointsUpdated"; strings.Join(events, " ") != want {
		t.Fatalf("entries %v, want %s", events, want)
	}
	if join := tl.Entries[4]; join.Waited != 5*ms || join.Took != 3*ms {
		t.Errorf("join waited %v took %v, want 5ms after the report was stored, 3ms", join.Waited, join.Took)
	}
	if tl.Where != "endpoints" || tl.Verdict != "Running and Ready; in service/web" || !Settled(tl.Verdict) {
		t.Errorf("where %q verdict %q", tl.Where, tl.Verdict)
	}
}

package validate

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
)

// TestEvent: kube's legacy Event validation — the involved object's
// namespace, and a new Event's reporting fields — with its messages.
func TestEvent(t *testing.T) {
	ev := func(ns, involved string, eventTime bool, mod func(*corev1.Event)) *corev1.Event {
		e := &corev1.Event{Metadata: &corev1.ObjectMeta{Name: "e", Namespace: ns},
			InvolvedObject: &corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: involved}, Reason: "Started", Type: "Normal"}
		if eventTime {
			e.EventTime, e.ReportingComponent, e.ReportingInstance, e.Action = timestamppb.Now(), "kubelet", "node-1", "Start"
		}
		if mod != nil {
			mod(e)
		}
		return e
	}
	for _, c := range []struct {
		name string
		e    *corev1.Event
		msg  string // "" when valid
	}{
		{"same namespace", ev("team", "team", false, nil), ""},
		{"another namespace's object", ev("team", "other", false, nil), `Event "e" is invalid: involvedObject.namespace: Invalid value: "other": does not match event.namespace`},
		{"cluster-scoped object in default", ev("default", "", false, nil), ""},
		{"cluster-scoped object elsewhere", ev("team", "", false, nil), `involvedObject.namespace: Invalid value: "": does not match event.namespace`},
		{"new event, cluster-scoped object in kube-system", ev("kube-system", "", true, nil), ""},
		{"new event, cluster-scoped object elsewhere", ev("team", "", true, nil), `involvedObject.namespace: Invalid value: "": does not match event.namespace`},
		{"new event without reporting fields", ev("team", "team", true, func(e *corev1.Event) { e.ReportingComponent, e.ReportingInstance, e.Action = "", "", "" }),
			"[reportingComponent: Required value, reportingComponent: Invalid value: \"\": name part must be non-empty"},
		{"new event with a long reason", ev("team", "team", true, func(e *corev1.Event) { e.Reason = strings.Repeat("r", 129) }),
			`reason: Invalid value: "": can have at most 128 characters`},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := Object(c.e)
			switch {
			case c.msg == "" && st != nil:
				t.Fatalf("refused: %v", st.GetMessage())
			case c.msg != "" && (st == nil || st.GetCode() != 422 || !strings.Contains(st.GetMessage(), c.msg)):
				t.Fatalf("got %v, want 422 with %q", st, c.msg)
			}
		})
	}
}

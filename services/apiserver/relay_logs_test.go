package apiserver

import (
	"context"
	"errors"
	"testing"

	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/nodelogs"
)

// TestPodLogsRefusals: a node's refusal of a log request reaches the
// client as kubelet's reaches kubectl through kube-apiserver: a 400
// BadRequest with kubelet's words ("is waiting to start: ..."), a 404 for
// a pod the node does not know; another failure is a 404 naming the node's
// error.
func TestPodLogsRefusals(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t)
	conn := bustest.Connect(t, srv, "api-logs")
	node := bustest.Connect(t, srv, "node")
	sub, err := nodelogs.Serve(context.Background(), node.NATS(), "n1", func(req nodelogs.Request, _ int) (nodelogs.Reply, error) {
		switch req.Pod {
		case "waiting":
			return nodelogs.Reply{}, &nodelogs.Error{Reason: nodelogs.ReasonBadRequest, Message: `container "c" in pod "waiting" is waiting to start: ContainerCreating`}
		case "gone":
			return nodelogs.Reply{}, &nodelogs.Error{Reason: nodelogs.ReasonNotFound, Message: `pod "gone" does not exist`}
		}
		return nodelogs.Reply{}, errors.New("disk on fire")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	relays := NodeRelays{NATS: conn.NATS()}
	for _, tc := range []struct {
		pod    string
		code   int32
		reason string
		msg    string
	}{
		{"waiting", 400, "BadRequest", `container "c" in pod "waiting" is waiting to start: ContainerCreating`},
		{"gone", 404, "NotFound", `pod "gone" does not exist`},
		{"broken", 404, "NotFound", "nodelogs: the node could not serve the log: disk on fire"},
	} {
		pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: tc.pod, Namespace: "team"}, Spec: &corev1.PodSpec{NodeName: "n1"}}
		_, st := relays.PodLogs(context.Background(), pod, LogOptions{Container: "c"})
		if st.GetCode() != tc.code || st.GetReason() != tc.reason || st.GetMessage() != tc.msg {
			t.Errorf("%s: %d %s %q, want %d %s %q", tc.pod, st.GetCode(), st.GetReason(), st.GetMessage(), tc.code, tc.reason, tc.msg)
		}
	}
}

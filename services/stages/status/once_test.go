package status

import (
	"context"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// TestDeadlineExceededRecordedOnce: DeadlineExceeded is recorded once per
// pod. A second report of it — another envelope, as a node agent
// restarted while killing the pod sends — leaves the Event at count 1,
// whether the report's first attempt meets the stored Event (a conflict)
// or not; another reason is still counted on top.
func TestDeadlineExceededRecordedOnce(t *testing.T) {
	s, env, _, _ := reportFixture(t)
	ctx := context.Background()
	if _, err := env.Store.Create(ctx, reportPod()); err != nil {
		t.Fatal(err)
	}
	for seq, reasons := range [][]string{{"DeadlineExceeded", "Killing"}, {"DeadlineExceeded", "Killing"}, {"DeadlineExceeded"}} {
		rep := reportEvent(int64(seq+1), &corev1.PodStatus{Phase: "Running"}, reasons...)
		if err := s.Handle(ctx, stagetest.Deliver(env, rep)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int32{"DeadlineExceeded": 1, "Killing": 2}
	if got := eventCounts(t, env); !equalCounts(got, want) {
		t.Fatalf("Events %v, want %v", got, want)
	}
}

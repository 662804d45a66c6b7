package stage_test

import (
	"errors"
	"testing"

	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// TestReplyOnlyToInboxes: Reply answers an inbox and drops (without an
// error) any other subject — an event subject above all, which the stage
// could otherwise publish on with its own permissions.
func TestReplyOnlyToInboxes(t *testing.T) {
	tests := []struct {
		subject string
		ok      bool
	}{
		{"_INBOX.abc", true},
		{"_INBOX.stage-api.x1.7", true},
		{"podflow.pod.PodAuthorized.~.default.x", false},
		{"podflow.store.put", false},
		{"$JS.API.STREAM.DELETE.PODFLOW_EVENTS", false},
		{"_INBOX", false},
		{"_INBOX.", false},
		{"_INBOX..x", false},
		{"_INBOX.>", false},
		{"_INBOX.a.*", false},
		{"_INBOX.a b", false},
		{"x._INBOX.a", false},
	}
	for _, tt := range tests {
		t.Run(tt.subject, func(t *testing.T) {
			err := stage.CheckReplySubject(tt.subject)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, stage.ErrReplySubject)) {
				t.Fatalf("CheckReplySubject(%q) = %v, want ok %v", tt.subject, err, tt.ok)
			}
			env, pub, _ := stagetest.NewEnv("s")
			if err := stage.Reply(env, tt.subject, stage.Success(200, "pods", "p"), nil); err != nil {
				t.Fatalf("Reply: %v", err)
			}
			if got := len(pub.Replies()); (got == 1) != tt.ok {
				t.Errorf("%d replies sent to %q, want ok %v", got, tt.subject, tt.ok)
			}
		})
	}
}

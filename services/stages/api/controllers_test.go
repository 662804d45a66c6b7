package api

import (
	"errors"
	"testing"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// TestControllerReplySubjects: the answer to a controller's pod request,
// and to a PodRequested made as a controller's user, goes only to that
// controller stage's inboxes: not another controller's, not a user's,
// not a subject outside the inboxes.
func TestControllerReplySubjects(t *testing.T) {
	rsInbox := bus.InboxPrefix(pipeline.StageRole(pipeline.ReplicaSet)) + ".abc"
	if err := checkControllerReply(rsInbox, pipeline.ReplicaSet); err != nil {
		t.Errorf("the replicaset stage's own inbox is refused: %v", err)
	}
	rsUser := pipeline.ControllerUser(pipeline.ReplicaSet)
	if err := checkReplyOf(rsInbox, rsUser); err != nil {
		t.Errorf("the replicaset controller's user may not be answered in its inbox: %v", err)
	}
	hostile := []string{
		bus.InboxPrefix(pipeline.StageRole(pipeline.ReplicationController)) + ".abc", // another controller's
		bus.UserInbox("alice") + ".abc",                                              // a user's
		"podflow.events.pods",                                                        // not an inbox
		"",
	}
	for _, s := range hostile {
		if err := checkControllerReply(s, pipeline.ReplicaSet); !errors.Is(err, stage.ErrReplySubject) {
			t.Errorf("checkControllerReply(%q) = %v, want ErrReplySubject", s, err)
		}
		if err := checkReplyOf(s, rsUser); !errors.Is(err, stage.ErrReplySubject) {
			t.Errorf("checkReplyOf(%q, replicaset controller) = %v, want ErrReplySubject", s, err)
		}
	}
}

package apiserver

import (
	"errors"
	"testing"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// TestCheckNodeReply: NodeTokens answers a token request only into a
// node agent's inbox (a node's or a simulated cluster's), never into a
// stage's, the store's, a client's or anything that is not an inbox: a
// token goes to no one but a node. (The NodeRestriction checks and the
// token's binding are attacked in services/apiserver/nodetoken_test.go.)
func TestCheckNodeReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reply string
		ok    bool
	}{
		{bus.InboxPrefix(pipeline.NodeRole("n1")) + ".abc", true},
		{bus.InboxPrefix(pipeline.SimNodesRole("sim")) + ".abc", true},
		{bus.InboxPrefix(pipeline.StageRole(pipeline.Scheduler)) + ".abc", false},
		{bus.InboxPrefix(pipeline.RoleStore) + ".abc", false},
		{bus.UserInbox("alice") + ".abc", false},
		{"podflow.pods.x", false},
		{"", false},
	} {
		err := checkNodeReply(tc.reply)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, stage.ErrReplySubject)) {
			t.Errorf("reply %q: %v, want ok %v", tc.reply, err, tc.ok)
		}
	}
}

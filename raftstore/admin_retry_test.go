package raftstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/raftstore"
)

// TestAdminRetriesIndeterminate: a membership change whose leader lost
// its leadership while committing it (Indeterminate: "leadership lost
// while committing log") is asked again, as membership changes are
// idempotent; a replica joining a busy cluster would otherwise fail to
// start. A fake leader (the wire protocol by hand) answers the first
// request Indeterminate and the second with success.
func TestAdminRetriesIndeterminate(t *testing.T) {
	_, nc := startNATS(t)
	const subject = "fake.store"
	var asked atomic.Int32
	if _, err := nc.Subscribe(subject+".admin", func(m *nats.Msg) {
		resp := &storev1.AdminResponse{Index: 7}
		if asked.Add(1) == 1 {
			resp = &storev1.AdminResponse{Error: &storev1.Error{Code: storev1.Code_CODE_INDETERMINATE, Message: "apply: leadership lost while committing log"}}
		}
		data, _ := proto.Marshal(resp)
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	c, err := raftstore.NewClient(nc, raftstore.ClientConfig{Subject: subject, RetryBackoffMin: time.Millisecond, RetryBackoffMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.AddVoter(ctx, "r3", "127.0.0.1:1"); err != nil {
		t.Fatalf("AddVoter after one Indeterminate answer: %v", err)
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("the leader was asked %d times, want 2", n)
	}
}

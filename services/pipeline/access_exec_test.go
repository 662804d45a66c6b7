package pipeline_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/services/pipeline"
)

// frames numbers the messages delivers publishes.
var frames atomic.Int64

// delivers reports whether a message pub publishes on subject reaches
// sub, subscribed to it, within a second. The message is one of its own,
// so that calls on one subject may run side by side (parallel subtests,
// each waiting its second for a refused message at once).
func delivers(t *testing.T, pub, sub *bus.Conn, subject string) bool {
	t.Helper()
	return deliversWithin(t, pub, sub, subject, time.Second)
}

// deliversWithin is delivers waiting up to d: a message that must arrive
// is waited for as long as a loaded machine may take (bustest.Timeout),
// one that must not for a second.
func deliversWithin(t *testing.T, pub, sub *bus.Conn, subject string, d time.Duration) bool {
	t.Helper()
	s, err := sub.NATS().SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	if err := sub.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	frame := fmt.Sprintf("frame %d", frames.Add(1))
	if err := pub.NATS().Publish(subject, []byte(frame)); err != nil {
		return false
	}
	if err := pub.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(d)
	for {
		m, err := s.NextMsg(time.Until(deadline))
		if err != nil {
			return false
		}
		if string(m.Data) == frame {
			return true
		}
	}
}

// TestExecSubjects: the api stage opens exec sessions on any node and
// sends their input; a node agent accepts sessions, reads their input and
// sends their output only for its own node.
func TestExecSubjects(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	api := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.API), "api")
	n1 := bustest.ConnectAs(t, srv, pipeline.NodeRole("n1"), "n1")
	const s = "0123456789abcdef0123456789abcdef"
	open := func(node string) string { return pipeline.ExecPrefix + "." + node }
	in := func(node string) string { return open(node) + "." + s + ".in" }
	out := func(node string) string { return open(node) + "." + s + ".out" }

	if err := serves(t, n1, api, open("n1")); err != nil {
		t.Errorf("node n1 does not accept its sessions from the api stage: %v", err)
	}
	t.Run("allowed", func(t *testing.T) {
		for _, c := range []struct {
			name     string
			pub, sub *bus.Conn
			subject  string
		}{
			{"api to n1's session", api, n1, in("n1")},
			{"n1's session to api", n1, api, out("n1")},
		} {
			t.Run(c.name, func(t *testing.T) {
				if !deliversWithin(t, c.pub, c.sub, c.subject, bustest.Timeout) {
					t.Errorf("%s is not delivered", c.subject)
				}
			})
		}
	})
	t.Run("refused", func(t *testing.T) {
		// n1 may not send output for n2's sessions.
		if delivers(t, n1, admin, out("n2")) {
			t.Errorf("node n1 may send n2's session output")
		}
		for _, subject := range []string{open("n2"), in("n2")} {
			if !subscribeRefused(t, n1, subject) {
				t.Errorf("node n1 may subscribe to %s", subject)
			}
		}
	})
}

package pipeline_test

import (
	"testing"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/services/pipeline"
)

// TestTokenSubjects: a node agent asks for its pods' ServiceAccount tokens
// on TokenSubject(its node) only; only the api stage receives those
// requests. Another node, a client, any other stage and the store cannot
// publish on a node's token subject, and no node can listen on one (and
// so read another node's requests).
func TestTokenSubjects(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	api := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.API), "api")
	n1 := bustest.ConnectAs(t, srv, pipeline.NodeRole("n1"), "n1")
	n2 := bustest.ConnectAs(t, srv, pipeline.NodeRole("n2"), "n2")
	subject := pipeline.TokenSubject("n1")

	if err := serves(t, api, n1, subject); err != nil {
		t.Fatalf("the api stage does not answer n1's token request: %v", err)
	}
	publishers := map[string]*bus.Conn{
		"node n2":   n2,
		"a user":    bustest.ConnectUser(t, srv, "alice", "alice"),
		"the store": bustest.ConnectAs(t, srv, pipeline.RoleStore, "store"),
	}
	for _, s := range pipeline.Stages {
		if s != pipeline.API {
			publishers["stage "+s] = bustest.ConnectAs(t, srv, pipeline.StageRole(s), s)
		}
	}
	for name, c := range publishers {
		t.Run(name+" publishes on n1's subject", func(t *testing.T) {
			t.Parallel()
			if delivers(t, c, admin, subject) {
				t.Errorf("%s may ask for n1's tokens on %s", name, subject)
			}
		})
	}
	for _, c := range []*bus.Conn{n1, n2} {
		if !subscribeRefused(t, c, pipeline.TokenPrefix+".*") {
			t.Errorf("a node may listen to the token requests")
		}
	}
}

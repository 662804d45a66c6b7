package nodewire_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/podflow/podflow/ops/processes/nodewire"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
)

// TestHeartbeatKeepsAdvertisedResources: a resource a client advertised
// through nodes/status (the scheduler e2e tests' example.com/fakecpu)
// survives the agent's status updates, as kubelet leaves the resources it
// does not manage; the agent's own resources are the agent's, and a
// resource the client removed stays removed.
func TestHeartbeatKeepsAdvertisedResources(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := objects.New(raftstoretest.MakeCluster(t, 1).Client(t))
	w := nodewire.NewStore(store)
	agent := func() *corev1.NodeStatus {
		return &corev1.NodeStatus{Capacity: map[string]string{"cpu": "4", "pods": "110"},
			Allocatable: map[string]string{"cpu": "3900m", "pods": "110"}}
	}
	if err := w.RegisterNode(ctx, &corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n1"}, Status: agent()}); err != nil {
		t.Fatal(err)
	}
	setStatus := func(f func(*corev1.NodeStatus)) {
		t.Helper()
		if _, err := objects.Mutate(ctx, store, "", "n1", func(n *corev1.Node) error { f(n.Status); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, capacity, allocatable map[string]string) {
		t.Helper()
		n, err := objects.Get[*corev1.Node](ctx, store, "", "n1")
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(n.GetStatus().GetCapacity(), capacity) || !maps.Equal(n.GetStatus().GetAllocatable(), allocatable) {
			t.Errorf("%s: capacity %v allocatable %v, want %v and %v", what, n.GetStatus().GetCapacity(),
				n.GetStatus().GetAllocatable(), capacity, allocatable)
		}
	}

	// A client advertises an extended resource and tries to raise cpu.
	setStatus(func(st *corev1.NodeStatus) {
		st.Capacity["example.com/fakecpu"], st.Allocatable["example.com/fakecpu"] = "1k", "1k"
		st.Capacity["cpu"], st.Allocatable["cpu"] = "64", "64"
	})
	if err := w.UpdateNodeStatus(ctx, "n1", agent()); err != nil {
		t.Fatal(err)
	}
	check("after a heartbeat",
		map[string]string{"cpu": "4", "pods": "110", "example.com/fakecpu": "1k"},
		map[string]string{"cpu": "3900m", "pods": "110", "example.com/fakecpu": "1k"})

	// The client removes it again: the next heartbeat does not bring it back.
	setStatus(func(st *corev1.NodeStatus) {
		delete(st.Capacity, "example.com/fakecpu")
		delete(st.Allocatable, "example.com/fakecpu")
	})
	if err := w.UpdateNodeStatus(ctx, "n1", agent()); err != nil {
		t.Fatal(err)
	}
	check("after removal", agent().Capacity, agent().Allocatable)
}

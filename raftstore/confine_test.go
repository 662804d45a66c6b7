package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
)

// bindOnly is a toy of the scheduler's confinement: a pod value
// "spec=<spec>;node=<node>" may only go from no node to one; no create, no
// delete, no other change.
func bindOnly(old, new []byte) error {
	switch {
	case old == nil:
		return errors.New("may not create pods")
	case new == nil:
		return errors.New("may not delete pods")
	}
	oldSpec, oldNode, _ := strings.Cut(string(old), ";node=")
	newSpec, newNode, _ := strings.Cut(string(new), ";node=")
	if oldSpec != newSpec {
		return fmt.Errorf("may change only the node, not %q to %q", oldSpec, newSpec)
	}
	if oldNode != "" && newNode != oldNode {
		return errors.New("pod already bound")
	}
	return nil
}

// TestWriteFilterConfines: a named writer with a WriteFilter check on a
// key may make exactly the changes the check allows — the scheduler binds
// a pod and cannot rewrite it to privileged, rebind it, create or delete
// one — while other writers and other keys are WriteACL's alone. A check
// pins what it saw: when the key changes between the check and the apply,
// the write fails with ErrConflict instead of landing on a value no check
// saw (red without the pin: the blind put overwrote the admin's change),
// on every replica (red when the proposed entry lacks the pin: the
// followers applied the blind put).
func TestWriteFilterConfines(t *testing.T) {
	release := make(chan struct{})
	checking := make(chan struct{}, 1)
	c := raftstoretest.MakeCluster(t, 3, func(cfg *raftstore.Config) {
		cfg.WriteFilter = func(user, key string) raftstore.WriteCheck {
			if user != "stage-scheduler" || !strings.HasPrefix(key, "/registry/pods/") {
				return nil
			}
			if strings.HasSuffix(key, "/race") {
				return func(old, new []byte) error {
					checking <- struct{}{}
					<-release
					return bindOnly(old, new)
				}
			}
			return bindOnly
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := c.Client(t)
	sched, err := raftstore.NewClient(c.Conn(t), raftstore.ClientConfig{User: "stage-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	const pod = "/registry/pods/default/web"
	rev, err := admin.Create(ctx, pod, []byte("spec=plain;node="))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sched.Update(ctx, pod, []byte("spec=privileged;node="), rev); !errors.Is(err, raftstore.ErrForbidden) {
		t.Fatalf("the scheduler rewrote a pod's spec: %v, want ErrForbidden", err)
	}
	unbound := rev
	if rev, err = sched.Update(ctx, pod, []byte("spec=plain;node=n1"), rev); err != nil {
		t.Fatalf("the scheduler binds a pod: %v", err)
	}
	// Another replica binds on the stale, unbound revision: a conflict, as
	// at apply (it re-reads), not a rebind refused against a value its
	// decision never saw.
	if _, err := sched.Update(ctx, pod, []byte("spec=plain;node=n2"), unbound); !errors.Is(err, raftstore.ErrConflict) {
		t.Fatalf("a bind comparing a stale revision: %v, want ErrConflict", err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"rebind", func() error { _, err := sched.Update(ctx, pod, []byte("spec=plain;node=n2"), rev); return err }},
		{"privileged and bound", func() error {
			_, err := sched.Update(ctx, pod, []byte("spec=privileged;node=n1"), rev)
			return err
		}},
		{"delete", func() error { _, err := sched.Delete(ctx, pod, rev); return err }},
		{"create", func() error {
			_, err := sched.Create(ctx, "/registry/pods/default/new", []byte("spec=x;node="))
			return err
		}},
		{"blind put in a txn", func() error {
			_, err := sched.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: pod, Value: []byte("spec=hostPID;node=n1")}}})
			return err
		}},
	} {
		if err := tc.do(); !errors.Is(err, raftstore.ErrForbidden) {
			t.Errorf("%s: %v, want ErrForbidden", tc.name, err)
		}
	}
	if kv, err := admin.Get(ctx, pod); err != nil || string(kv.Value) != "spec=plain;node=n1" {
		t.Fatalf("pod after the refused writes: %v, %v", kv, err)
	}
	// Unconfined keys and writers: WriteACL alone (nil: everything).
	if _, err := sched.Create(ctx, "/registry/events/default/e", []byte("event")); err != nil {
		t.Errorf("the scheduler writes an Event: %v", err)
	}
	if _, err := admin.Update(ctx, pod, []byte("spec=privileged;node=n1"), rev); err != nil {
		t.Errorf("the admin rewrites a pod: %v", err)
	}

	// The pin: the check sees an unbound pod, the admin changes it, then
	// the scheduler's blind put (no compare of its own) must not land.
	const race = "/registry/pods/default/race"
	if _, err := admin.Create(ctx, race, []byte("spec=plain;node=")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := sched.Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: race, Value: []byte("spec=plain;node=n1")}}})
		done <- err
	}()
	<-checking
	kv, err := admin.Get(ctx, race)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Update(ctx, race, []byte("spec=privileged;node="), kv.ModRevision); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; !errors.Is(err, raftstore.ErrConflict) {
		t.Fatalf("a checked write after the key changed: %v, want ErrConflict", err)
	}
	if kv, err := admin.Get(ctx, race); err != nil || string(kv.Value) != "spec=privileged;node=" {
		t.Fatalf("value after the raced write: %v, %v; want the admin's", kv, err)
	}
	// Every replica applied the pin: the followers decode the entry the
	// leader proposed, which must carry the compares the leader added.
	commit := c.Node(c.Leader(t)).Stats().CommitIndex
	raftstoretest.WaitFor(t, 20*time.Second, "every replica applying the raced write", func() bool {
		for _, i := range c.Live() {
			if c.Node(i).Stats().AppliedIndex < commit {
				return false
			}
		}
		return true
	})
	for _, i := range c.Live() {
		var v []byte
		if kv, _ := c.Node(i).LocalGet(race); kv != nil {
			v = kv.Value
		}
		if string(v) != "spec=privileged;node=" {
			t.Errorf("replica %s holds %q after the raced write; want the admin's value", c.Node(i).ID(), v)
		}
	}
}

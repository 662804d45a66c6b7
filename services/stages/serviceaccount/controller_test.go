package serviceaccount_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/serviceaccount"
)

// run starts replicas of the controller stage over a real store and bus,
// as `podflow stage serviceaccount` runs them (stage.Run, no consumer).
func run(t *testing.T, replicas int) *objects.Store {
	t.Helper()
	c := raftstoretest.MakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	cfg := bus.DefaultConfig()
	cfg.URLs, cfg.Name = []string{c.NATS.ClientURL()}, "sa-test"
	conn, err := bus.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	st := objects.New(c.Client(t))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, replicas)
	for i := range replicas {
		env := stage.NewEnv(conn, st, pipeline.ServiceAccount, "serviceaccount-"+string(rune('1'+i)), log)
		h, err := serviceaccount.New(env, serviceaccount.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := pipeline.RunnerConfig(pipeline.ServiceAccount, env.Replica)
		go func() {
			done <- stage.Run(runCtx, conn, env, h, stage.Config{Runner: rc, NoConsumer: true, ResyncPeriod: 200 * time.Millisecond})
		}()
	}
	t.Cleanup(func() {
		stop()
		for range replicas {
			if err := <-done; err != nil {
				t.Errorf("controller: %v", err)
			}
		}
	})
	return st
}

func namespace(name string, terminating bool) *corev1.Namespace {
	ns := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: name, Uid: "ns-" + name}}
	nslifecycle.PrepareForCreate(ns)
	if terminating {
		ns.Metadata.DeletionTimestamp = timestamppb.Now()
		ns.Status.Phase = nslifecycle.PhaseTerminating
	}
	return ns
}

func account(t *testing.T, st *objects.Store, ns string) (*corev1.ServiceAccount, bool) {
	t.Helper()
	sa, err := objects.Get[*corev1.ServiceAccount](context.Background(), st, ns, "default")
	return sa, err == nil
}

// TestDefaultServiceAccount: two replicas give every active namespace,
// present or new, exactly one "default" ServiceAccount; a deleted one is
// created again; a namespace being terminated gets none.
func TestDefaultServiceAccount(t *testing.T) {
	st := run(t, 2)
	ctx := context.Background()
	for _, ns := range []*corev1.Namespace{namespace("a", false), namespace("doomed", true)} {
		if _, err := st.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	raftstoretest.WaitFor(t, 10*time.Second, "default in a", func() bool { _, ok := account(t, st, "a"); return ok })
	first, _ := account(t, st, "a")
	if _, err := st.Create(ctx, namespace("b", false)); err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "default in the new namespace b", func() bool { _, ok := account(t, st, "b"); return ok })

	// Resyncs of both replicas change nothing: still the first account.
	time.Sleep(time.Second)
	if sa, _ := account(t, st, "a"); sa.GetMetadata().GetUid() != first.GetMetadata().GetUid() || objects.Revision(sa) != objects.Revision(first) {
		t.Errorf("the account was written again: %v, first %v", sa.GetMetadata(), first.GetMetadata())
	}
	if _, ok := account(t, st, "doomed"); ok {
		t.Error("a terminating namespace got a ServiceAccount")
	}

	if _, err := st.Delete(ctx, objects.ServiceAccounts, "a", "default", 0); err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "default in a again", func() bool {
		sa, ok := account(t, st, "a")
		return ok && sa.GetMetadata().GetUid() != first.GetMetadata().GetUid()
	})
	sas, _, err := objects.List[*corev1.ServiceAccount](ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(sas) != 2 {
		t.Errorf("%d ServiceAccounts, want one in a and one in b: %v", len(sas), sas)
	}
}

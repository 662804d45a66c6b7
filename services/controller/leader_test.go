package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/objects"
)

// TestLeaseLockCompareAndSwap: the store's LeaseLock is client-go's
// LeaseLock: Get of a missing Lease is Kubernetes' NotFound (client-go
// then creates it), a second Create fails, and of two candidates that
// read the same Lease only the first Update wins — the other gets the
// store's conflict, so two never both take it.
func TestLeaseLockCompareAndSwap(t *testing.T) {
	cl := raftstoretest.MakeCluster(t, 1)
	st := objects.New(cl.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := &controller.LeaseLock{Store: st, Namespace: "kube-system", Name: "podflow-x", ID: "a"}
	b := &controller.LeaseLock{Store: st, Namespace: "kube-system", Name: "podflow-x", ID: "b"}
	if _, _, err := a.Get(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of no Lease: %v, want NotFound", err)
	}
	now := metav1.NewTime(time.Now())
	rec := func(holder string, transitions int) resourcelock.LeaderElectionRecord {
		return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now, LeaderTransitions: transitions}
	}
	if err := a.Create(ctx, rec("a", 0)); err != nil {
		t.Fatal(err)
	}
	if err := b.Create(ctx, rec("b", 0)); !errors.Is(err, raftstore.ErrAlreadyExists) {
		t.Fatalf("a second Create: %v, want ErrAlreadyExists", err)
	}
	got, raw, err := b.Get(ctx)
	if err != nil || got.HolderIdentity != "a" || got.LeaseDurationSeconds != 15 || len(raw) == 0 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, _, err := a.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Update(ctx, rec("b", 1)); err != nil {
		t.Fatal(err)
	}
	if err := a.Update(ctx, rec("a", 1)); !errors.Is(err, raftstore.ErrConflict) {
		t.Fatalf("the second Update of one read: %v, want ErrConflict", err)
	}
	if got, _, _ := a.Get(ctx); got.HolderIdentity != "b" || got.LeaderTransitions != 1 {
		t.Fatalf("the Lease holds %+v, want b's", got)
	}
}

// TestElectionConfigValidate: client-go's rules, checked before a
// replica starts.
func TestElectionConfigValidate(t *testing.T) {
	ok := controller.DefaultElectionConfig("nodelifecycle", "r1")
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*controller.ElectionConfig){
		"no name":                          func(c *controller.ElectionConfig) { c.Name = "" },
		"no identity":                      func(c *controller.ElectionConfig) { c.Identity = "" },
		"lease not longer than deadline":   func(c *controller.ElectionConfig) { c.LeaseDuration = c.RenewDeadline },
		"deadline not longer than retries": func(c *controller.ElectionConfig) { c.RetryPeriod = c.RenewDeadline },
		"lease under a second": func(c *controller.ElectionConfig) {
			c.LeaseDuration, c.RenewDeadline = 900*time.Millisecond, 500*time.Millisecond
			c.RetryPeriod = 100 * time.Millisecond
		},
	} {
		c := ok
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
}

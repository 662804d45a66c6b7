package apiserver_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestUnconditionalUpdatesRace: an update (PUT) whose object carries no
// resourceVersion is unconditional, as kube-apiserver's for every kind
// whose strategy allows it: concurrent ones all succeed, each applied to
// what the one before it stored, where a compare-and-swap against the
// revision read first would answer 409 to all but one (the conformance
// test "should be able to update and delete ResourceQuota" updates the
// object it created while the quota controller writes its status). Each
// round's twelve writers lose at most eleven races each, under the retry
// bound.
func TestUnconditionalUpdatesRace(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	// A bound on a hang: 72 updates, each retried by the server as long as
	// it loses races, took over a minute under -race at load 60.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(restConfig(s))
	const writers, rounds = 12, 3
	for _, c := range []struct {
		name   string
		create func() error
		update func(i int) error
	}{
		{"ResourceQuota (generic kind)", func() error {
			_, err := cs.CoreV1().ResourceQuotas("default").Create(ctx, &k8scorev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"},
				Spec: k8scorev1.ResourceQuotaSpec{Hard: k8scorev1.ResourceList{k8scorev1.ResourcePods: resource.MustParse("1")}}}, metav1.CreateOptions{})
			return err
		}, func(i int) error {
			_, err := cs.CoreV1().ResourceQuotas("default").Update(ctx, &k8scorev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"},
				Spec: k8scorev1.ResourceQuotaSpec{Hard: k8scorev1.ResourceList{k8scorev1.ResourcePods: *resource.NewQuantity(int64(i+2), resource.DecimalSI)}}}, metav1.UpdateOptions{})
			return err
		}},
		{"ConfigMap", func() error {
			_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{})
			return err
		}, func(i int) error {
			_, err := cs.CoreV1().ConfigMaps("default").Update(ctx, &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"},
				Data: map[string]string{"writer": strconv.Itoa(i)}}, metav1.UpdateOptions{})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.create(); err != nil {
				t.Fatal(err)
			}
			for round := range rounds {
				var wg sync.WaitGroup
				errs := make(chan error, writers)
				for i := range writers {
					wg.Go(func() {
						if err := c.update(i); err != nil {
							errs <- fmt.Errorf("round %d, writer %d: %w", round, i, err)
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			}
		})
	}
}

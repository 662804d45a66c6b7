package up

import (
	"context"
	"fmt"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stages/rootcacert"
)

// waitBootstrapped waits until the controllers have made what a fresh
// cluster has — the default namespace with its default ServiceAccount
// and kube-root-ca.crt (the api process's bootstrap controller, the
// serviceaccount and rootcacert stages) — so that the first pod a user
// creates after `up` is not refused for a missing account.
func waitBootstrapped(ctx context.Context, st *objects.Store, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		_, err := objects.Get[*corev1.ServiceAccount](ctx, st, "default", "default")
		if err == nil {
			_, err = objects.Get[*corev1.ConfigMap](ctx, st, "default", rootcacert.ConfigMapName)
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the default namespace has no default ServiceAccount and kube-root-ca.crt after %s (the api, serviceaccount and rootcacert stages make them): %w", timeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

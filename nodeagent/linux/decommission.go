package linux

import (
	"context"
	"errors"
	"fmt"
)

// Decommission removes everything this node holds on the machine: every
// pod's sandbox (processes, mounts, cgroups, network namespace, IP), then
// the node's bridge and routing rule, then podflow's cgroup hierarchy if no
// other node uses it. It is what a node leaving the cluster, or
// `podflow up` stopping, does so that no kernel object outlives podflow.
// Idempotent.
func (r *Runtime) Decommission(ctx context.Context) error {
	sbs, err := r.ListSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("decommission: list sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range sbs {
		if err := r.RemovePodSandbox(ctx, sb.PodUID); err != nil {
			errs = append(errs, fmt.Errorf("decommission: pod %s: %w", sb.PodUID, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := r.net.RemoveBridge(ctx); err != nil {
		errs = append(errs, fmt.Errorf("decommission: bridge: %w", err))
	}
	if pods, err := r.cg.ListPods(ctx); err == nil && len(pods) == 0 {
		if err := r.cg.RemoveHierarchy(ctx); err != nil {
			errs = append(errs, fmt.Errorf("decommission: cgroups: %w", err))
		}
	}
	return errors.Join(errs...)
}

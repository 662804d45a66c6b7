package linux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
)

// Decommission removes everything this node holds on the machine: every
// pod's sandbox (processes, mounts, cgroups, network namespace, IP), then
// stray bridge ports, the node's bridge and routing rule, then podflow's
// cgroup hierarchy if no other node uses it, and checks with the kernel
// that none of it is left; only then it removes the node's lock file. It is what a node leaving the cluster, or
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
	if _, err := r.net.RemoveStrayPorts(ctx, nil); err != nil {
		errs = append(errs, fmt.Errorf("decommission: %w", err))
	}
	if err := r.net.RemoveBridge(ctx); err != nil {
		errs = append(errs, fmt.Errorf("decommission: bridge: %w", err))
	}
	if pods, err := r.cg.ListPods(ctx); err == nil && len(pods) == 0 {
		if err := r.cg.RemoveHierarchy(ctx); err != nil {
			errs = append(errs, fmt.Errorf("decommission: cgroups: %w", err))
		}
	}
	if err := r.leftovers(ctx); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		// Nothing of the node is left: no record of its owner is needed.
		errs = append(errs, r.nodeLock.remove())
	}
	return errors.Join(errs...)
}

// leftovers checks with the kernel that nothing of the node remains: no
// namespace, veth or address of a pod, no bridge, no pod cgroup.
func (r *Runtime) leftovers(ctx context.Context) error {
	var left []string
	atts, err := r.net.List(ctx)
	if err != nil {
		return fmt.Errorf("decommission: %w", err)
	}
	for _, a := range atts {
		left = append(left, "pod network "+a.PodUID)
	}
	if _, err := net.InterfaceByName(r.cfg.Network.BridgeName); err == nil {
		left = append(left, "bridge "+r.cfg.Network.BridgeName)
	}
	pods, err := r.cg.ListPods(ctx)
	if err != nil {
		return fmt.Errorf("decommission: %w", err)
	}
	for _, uid := range pods {
		left = append(left, "pod cgroup "+uid)
	}
	if len(left) > 0 {
		return fmt.Errorf("decommission: still on the machine: %s", strings.Join(left, ", "))
	}
	return nil
}

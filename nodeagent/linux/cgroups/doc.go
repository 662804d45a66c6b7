// Package cgroups gives podflow's node agent its cgroup hierarchy, on cgroup
// v1 and v2, with containerd/cgroups v3:
//
//	/<Root>/<qos>/pod<uid>/<container>     qos: guaranteed, burstable, besteffort
//
// Desired state is data: a PodPlan (QoS class, cpu shares and v2 weight from
// requests, CFS quota from limits, memory and pids limits; ResourcesFor
// converts requests and limits to those units) is plain data the node agent
// derives from a pod spec (nodeagent/linux PlanPod) — this package never
// sees a Pod — and the Manager applies a plan's Resources in one place. On v1 podflow uses the cpu, cpuacct, memory and
// pids hierarchies; on v2 the unified hierarchy with the cpu, memory and
// pids controllers. ModeAuto picks v2 on a pure v2 host and v1 on a legacy
// or hybrid one (a hybrid host binds the controllers to v1).
//
// ContainerUsage and NodeUsage read a container's cgroup, or the node's
// /<Root>, with containerd/cgroups' statistics: cumulative CPU time and
// the memory working set (usage less inactive file cache, as cAdvisor).
//
// Caller's obligations:
//
//  1. Run as root; New fails with ErrUnavailable, saying why, otherwise.
//  2. EnsurePod before EnsureContainer; put each container process into its
//     cgroup before it runs user code (clone3 CLONE_INTO_CGROUP with
//     Container.CgroupFD on v2, or Container.Add from a shim that waits).
//  3. Kill a pod's processes before RemovePod and a container's before
//     Container.Delete: both fail with ErrBusy while a process remains.
//     KillPod does it for a pod no runtime can stop (an orphan).
//  4. Give a restarted container a fresh cgroup (Delete, EnsureContainer),
//     so OOMKilled speaks of the current instance.
//
// Example:
//
//	m, err := cgroups.New(cgroups.DefaultConfig())
//	if err != nil {
//		return err // e.g. not root: use the simulated runtime
//	}
//	plan := linux.PlanPod(pod) // or a cgroups.PodPlan built by hand
//	uid := pod.GetMetadata().GetUid()
//	if err := m.EnsurePod(ctx, uid, plan.QOSClass, plan); err != nil {
//		return err
//	}
//	cp, _ := plan.Container("app")
//	cg, err := m.EnsureContainer(ctx, uid, plan.QOSClass, "app", cp)
//	if err != nil {
//		return err
//	}
//	_ = cg.Add(pid)
//	// ... the process exits ...
//	oom, _ := cg.OOMKilled()
//	_ = m.RemovePod(ctx, uid, plan.QOSClass)
package cgroups

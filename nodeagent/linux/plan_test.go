package linux_test

import (
	"testing"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/cgroups"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

func ctr(name string, req, lim map[string]string) *corev1.Container {
	return &corev1.Container{Name: name, Resources: &corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func rl(cpu, mem string) map[string]string {
	m := map[string]string{}
	if cpu != "" {
		m["cpu"] = cpu
	}
	if mem != "" {
		m["memory"] = mem
	}
	return m
}

const mi = 1 << 20

func TestPlanPod(t *testing.T) {
	tests := []struct {
		name       string
		init, app  []*corev1.Container
		qos        string
		pod        cgroups.Resources
		containers map[string]cgroups.Resources
	}{
		{
			name: "guaranteed: requests default to limits",
			app:  []*corev1.Container{ctr("app", nil, rl("500m", "128Mi")), ctr("side", rl("250m", "64Mi"), rl("250m", "64Mi"))},
			qos:  "Guaranteed",
			pod:  cgroups.Resources{CPUShares: 768, CPUQuota: 75000, CPUPeriod: 100000, MemoryLimit: 192 * mi, PidsLimit: cgroups.DefaultPodPidsLimit},
			containers: map[string]cgroups.Resources{
				"app":  {CPUShares: 512, CPUQuota: 50000, CPUPeriod: 100000, MemoryLimit: 128 * mi, PidsLimit: cgroups.DefaultPodPidsLimit},
				"side": {CPUShares: 256, CPUQuota: 25000, CPUPeriod: 100000, MemoryLimit: 64 * mi, PidsLimit: cgroups.DefaultPodPidsLimit},
			},
		},
		{
			name: "burstable: no pod limit unless every container has one",
			app:  []*corev1.Container{ctr("app", rl("1", "64Mi"), rl("2", "")), ctr("side", nil, nil)},
			qos:  "Burstable",
			pod:  cgroups.Resources{CPUShares: 1024, PidsLimit: cgroups.DefaultPodPidsLimit},
			containers: map[string]cgroups.Resources{
				"app":  {CPUShares: 1024, CPUQuota: 200000, CPUPeriod: 100000, PidsLimit: cgroups.DefaultPodPidsLimit},
				"side": {CPUShares: cgroups.MinShares, PidsLimit: cgroups.DefaultPodPidsLimit},
			},
		},
		{
			name: "besteffort",
			app:  []*corev1.Container{ctr("app", nil, nil)},
			qos:  "BestEffort",
			pod:  cgroups.Resources{CPUShares: cgroups.MinShares, PidsLimit: cgroups.DefaultPodPidsLimit},
			containers: map[string]cgroups.Resources{
				"app": {CPUShares: cgroups.MinShares, PidsLimit: cgroups.DefaultPodPidsLimit},
			},
		},
		{
			name: "tiny cpu: shares and quota floors",
			app:  []*corev1.Container{ctr("app", rl("1m", "16Mi"), rl("1m", "16Mi"))},
			qos:  "Guaranteed",
			pod:  cgroups.Resources{CPUShares: cgroups.MinShares, CPUQuota: cgroups.MinQuota, CPUPeriod: 100000, MemoryLimit: 16 * mi, PidsLimit: cgroups.DefaultPodPidsLimit},
			containers: map[string]cgroups.Resources{
				"app": {CPUShares: cgroups.MinShares, CPUQuota: cgroups.MinQuota, CPUPeriod: 100000, MemoryLimit: 16 * mi, PidsLimit: cgroups.DefaultPodPidsLimit},
			},
		},
		{
			name: "init containers: the pod gets the larger of the largest init and the app sum",
			init: []*corev1.Container{ctr("migrate", rl("2", "1Gi"), rl("2", "1Gi")), ctr("warm", rl("100m", "32Mi"), rl("100m", "32Mi"))},
			app:  []*corev1.Container{ctr("app", rl("500m", "256Mi"), rl("500m", "256Mi")), ctr("side", rl("500m", "2Gi"), rl("500m", "2Gi"))},
			qos:  "Guaranteed",
			pod:  cgroups.Resources{CPUShares: 2048, CPUQuota: 200000, CPUPeriod: 100000, MemoryLimit: 2304 * mi, PidsLimit: cgroups.DefaultPodPidsLimit},
			containers: map[string]cgroups.Resources{
				"migrate": {CPUShares: 2048, CPUQuota: 200000, CPUPeriod: 100000, MemoryLimit: 1024 * mi, PidsLimit: cgroups.DefaultPodPidsLimit},
				"warm":    {CPUShares: 102, CPUQuota: 10000, CPUPeriod: 100000, MemoryLimit: 32 * mi, PidsLimit: cgroups.DefaultPodPidsLimit},
				"app":     {CPUShares: 512, CPUQuota: 50000, CPUPeriod: 100000, MemoryLimit: 256 * mi, PidsLimit: cgroups.DefaultPodPidsLimit},
				"side":    {CPUShares: 512, CPUQuota: 50000, CPUPeriod: 100000, MemoryLimit: 2048 * mi, PidsLimit: cgroups.DefaultPodPidsLimit},
			},
		},
		{
			name: "unparseable quantities count as unset",
			app:  []*corev1.Container{ctr("app", rl("lots", ""), rl("", "much"))},
			qos:  "BestEffort",
			pod:  cgroups.Resources{CPUShares: cgroups.MinShares, PidsLimit: cgroups.DefaultPodPidsLimit},
			containers: map[string]cgroups.Resources{
				"app": {CPUShares: cgroups.MinShares, PidsLimit: cgroups.DefaultPodPidsLimit},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: &corev1.PodSpec{InitContainers: tt.init, Containers: tt.app}}
			plan := linux.PlanPod(pod)
			if plan.QOSClass != tt.qos {
				t.Errorf("QOSClass = %s, want %s", plan.QOSClass, tt.qos)
			}
			check := func(what string, got, want cgroups.Resources) {
				t.Helper()
				want.CPUWeight = weightOf(want.CPUShares)
				if got != want {
					t.Errorf("%s = %+v, want %+v", what, got, want)
				}
			}
			check("pod", plan.Resources, tt.pod)
			if len(plan.InitContainers) != len(tt.init) || len(plan.Containers) != len(tt.app) {
				t.Fatalf("plan has %d init and %d app containers", len(plan.InitContainers), len(plan.Containers))
			}
			for name, want := range tt.containers {
				cp, ok := plan.Container(name)
				if !ok {
					t.Fatalf("no plan for %q", name)
				}
				check(name, cp.Resources, want)
			}
			for _, c := range plan.InitContainers {
				if !c.Init {
					t.Errorf("%s not marked init", c.Name)
				}
			}
		})
	}
}

// weightOf is the expected v2 weight: runc's fixed points, else the
// conversion itself.
func weightOf(shares uint64) uint64 {
	switch shares {
	case 2:
		return 1
	case 1024:
		return 100
	case 262144:
		return 10000
	}
	return cgroups.SharesToWeight(shares)
}

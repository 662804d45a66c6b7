package framework

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

func ctr(name string, reqs, lims map[string]string) *corev1.Container {
	return &corev1.Container{Name: name, Resources: &corev1.ResourceRequirements{Requests: reqs, Limits: lims}}
}

func TestPodRequests(t *testing.T) {
	always := func(c *corev1.Container) *corev1.Container { c.RestartPolicy = "Always"; return c }
	cm := func(cpu, mem string) map[string]string {
		m := map[string]string{}
		if cpu != "" {
			m["cpu"] = cpu
		}
		if mem != "" {
			m["memory"] = mem
		}
		return m
	}
	const mi = 1024 * 1024
	tests := []struct {
		name             string
		containers, init []*corev1.Container
		want, wantNZ     Resources
	}{
		{
			name:       "sum of containers",
			containers: []*corev1.Container{ctr("a", cm("100m", "1Mi"), nil), ctr("b", cm("250m", "2Mi"), nil)},
			want:       Resources{MilliCPU: 350, Memory: 3 * mi},
			wantNZ:     Resources{MilliCPU: 350, Memory: 3 * mi},
		},
		{
			name:       "init container larger than the containers wins per resource",
			containers: []*corev1.Container{ctr("a", cm("100m", "10Mi"), nil), ctr("b", cm("100m", "10Mi"), nil)},
			init:       []*corev1.Container{ctr("i1", cm("500m", "1Mi"), nil), ctr("i2", cm("300m", "5Mi"), nil)},
			want:       Resources{MilliCPU: 500, Memory: 20 * mi},
			wantNZ:     Resources{MilliCPU: 500, Memory: 20 * mi},
		},
		{
			name:       "sidecar adds to containers and to later init containers",
			containers: []*corev1.Container{ctr("a", cm("100m", "10Mi"), nil)},
			init: []*corev1.Container{
				always(ctr("sidecar", cm("50m", "5Mi"), nil)),
				ctr("i", cm("400m", "1Mi"), nil),
			},
			// containers+sidecar = 150m/15Mi; init i runs beside sidecar: 450m/6Mi.
			want:   Resources{MilliCPU: 450, Memory: 15 * mi},
			wantNZ: Resources{MilliCPU: 450, Memory: 15 * mi},
		},
		{
			name:       "missing requests default for scoring only; explicit zero stays zero",
			containers: []*corev1.Container{ctr("a", nil, nil), ctr("b", cm("0", ""), nil)},
			want:       Resources{},
			wantNZ:     Resources{MilliCPU: 100, Memory: 2 * DefaultMemoryRequest},
		},
		{
			name:       "limits stand in for missing requests",
			containers: []*corev1.Container{ctr("a", cm("", "1Mi"), map[string]string{"cpu": "2", "memory": "8Mi", "ephemeral-storage": "1Gi"})},
			want:       Resources{MilliCPU: 2000, Memory: mi, EphemeralStorage: 1 << 30},
			wantNZ:     Resources{MilliCPU: 2000, Memory: mi, EphemeralStorage: 1 << 30},
		},
		{
			name:       "unknown resources are ignored",
			containers: []*corev1.Container{ctr("a", map[string]string{"cpu": "1", "nvidia.com/gpu": "1"}, nil)},
			want:       Resources{MilliCPU: 1000},
			wantNZ:     Resources{MilliCPU: 1000, Memory: DefaultMemoryRequest},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: &corev1.PodSpec{Containers: tt.containers, InitContainers: tt.init}}
			got, gotNZ, err := PodRequests(pod)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || gotNZ != tt.wantNZ {
				t.Errorf("PodRequests = %+v, %+v; want %+v, %+v", got, gotNZ, tt.want, tt.wantNZ)
			}
		})
	}
}

// TestPodRequestsMatchesTwoPasses checks PodRequests against podrules'
// two passes (plain, then missing cpu and memory requests taken as the
// defaults) on random pods whose containers, init containers and sidecars
// name cpu and memory in their requests, their limits or not at all: the
// single pass for pods that name both everywhere must not change a sum.
func TestPodRequestsMatchesTwoPasses(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 4))
	quantity := func(name string) map[string]string {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return map[string]string{name: "0"}
		}
		if name == ResourceCPU {
			return map[string]string{name: fmt.Sprintf("%dm", 1+rng.IntN(2000))}
		}
		return map[string]string{name: fmt.Sprintf("%dMi", 1+rng.IntN(4096))}
	}
	container := func(i int) *corev1.Container {
		reqs, lims := map[string]string{}, map[string]string{}
		for _, name := range []string{ResourceCPU, ResourceMemory} {
			into := reqs
			if rng.IntN(3) == 0 {
				into = lims
			}
			maps.Copy(into, quantity(name))
		}
		c := ctr(fmt.Sprintf("c%d", i), reqs, lims)
		if rng.IntN(4) == 0 {
			c.RestartPolicy = "Always"
		}
		return c
	}
	single := 0
	for range 2000 {
		spec := &corev1.PodSpec{}
		for i := range 1 + rng.IntN(3) {
			spec.Containers = append(spec.Containers, container(i))
		}
		for i := range rng.IntN(3) {
			spec.InitContainers = append(spec.InitContainers, container(10+i))
		}
		pod := &corev1.Pod{Spec: spec}
		want, err := podrules.PodRequests(pod, podrules.PodResourcesOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantNZ, err := podrules.PodRequests(pod, nonMissing)
		if err != nil {
			t.Fatal(err)
		}
		got, gotNZ, err := PodRequests(pod)
		if err != nil {
			t.Fatal(err)
		}
		if got != want || gotNZ != wantNZ {
			t.Fatalf("PodRequests(%v) = %+v, %+v; want %+v, %+v", spec, got, gotNZ, want, wantNZ)
		}
		if namesCPUAndMemory(pod) {
			single++
		}
	}
	if single == 0 || single == 2000 {
		t.Fatalf("%d of 2000 pods took the single pass: the test attacks neither path", single)
	}
}

func TestPodRequestsInvalidQuantity(t *testing.T) {
	pod := mkPod("p", "lots", "")
	if _, _, err := PodRequests(pod); !errors.Is(err, ErrInvalidObject) {
		t.Fatalf("err = %v, want ErrInvalidObject", err)
	}
}

func TestNodeAllocatable(t *testing.T) {
	tests := []struct {
		name        string
		alloc, capa map[string]string
		want        Resources
	}{
		{"allocatable", map[string]string{"cpu": "3500m", "memory": "1Gi", "pods": "110", "ephemeral-storage": "10G"},
			map[string]string{"cpu": "4"}, Resources{MilliCPU: 3500, Memory: 1 << 30, Pods: 110, EphemeralStorage: 10e9}},
		{"capacity when allocatable is absent", nil, map[string]string{"cpu": "4", "memory": "1Mi", "pods": "10"},
			Resources{MilliCPU: 4000, Memory: 1 << 20, Pods: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NodeAllocatable(&corev1.Node{Status: &corev1.NodeStatus{Allocatable: tt.alloc, Capacity: tt.capa}})
			if err != nil || got != tt.want {
				t.Fatalf("NodeAllocatable = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// BenchmarkPodRequests is PodRequests of a typical pod (cpu and memory
// requested), against podrules' two passes it replaces for such pods.
func BenchmarkPodRequests(b *testing.B) {
	pod := typicalPod(0)
	b.Run("two-passes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := podrules.PodRequests(pod, podrules.PodResourcesOptions{}); err != nil {
				b.Fatal(err)
			}
			if _, err := podrules.PodRequests(pod, nonMissing); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("PodRequests", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := PodRequests(pod); err != nil {
				b.Fatal(err)
			}
		}
	})
}

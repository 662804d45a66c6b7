package nodeagent

import (
	"testing"
	"time"
)

func TestBackoffNext(t *testing.T) {
	b := Backoff{Initial: 10 * time.Second, Max: 5 * time.Minute}
	var got []time.Duration
	var d time.Duration
	for range 8 {
		d = b.Next(d)
		got = append(got, d)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second,
		5 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff sequence = %v, want %v", got, want)
		}
	}
}

func TestAllocatableAfterReserves(t *testing.T) {
	capacity := map[string]string{"cpu": "2", "memory": "8Gi", "pods": "110"}
	reserved := map[string]string{"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
	got := allocatable(capacity, reserved)
	want := map[string]string{"cpu": "1900m", "memory": "7680Mi", "pods": "110"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("allocatable %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	// One resource at a time, as a pod's worker asks: the same.
	for _, k := range []string{"cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu"} {
		q, ok := allocatableOf(capacity, reserved, k)
		if wq, wok := got[k]; q != wq || ok != wok {
			t.Errorf("allocatableOf %s = %q, %v; want %q, %v", k, q, ok, wq, wok)
		}
	}
	if _, ok := got["ephemeral-storage"]; ok {
		t.Errorf("reserved a resource the node does not have: %v", got)
	}
	if small := allocatable(map[string]string{"cpu": "100m"}, map[string]string{"cpu": "1"}); small["cpu"] != "0" {
		t.Errorf("allocatable below zero: %v", small)
	}
}

type versionedRuntime struct {
	Runtime
	version string
}

func (r versionedRuntime) RuntimeVersion() string { return r.version }

func TestNodeInfoContainerRuntimeVersion(t *testing.T) {
	for _, c := range []struct {
		name string
		rt   Runtime
		want string
	}{
		{"a runtime that names itself", versionedRuntime{version: "podflow-sim://v1"}, "podflow-sim://v1"},
		{"one that does not", struct{ Runtime }{}, "podflow://" + Version()},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &Agent{cfg: Config{NodeName: "n1", Capacity: map[string]string{"cpu": "1"}}, rt: c.rt}
			if got := a.nodeStatus(time.Now()).GetNodeInfo().GetContainerRuntimeVersion(); got != c.want {
				t.Errorf("containerRuntimeVersion = %q, want %q", got, c.want)
			}
		})
	}
}

package bench

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestWorkloadOptionsValidate(t *testing.T) {
	ok := WorkloadOptions{Replicas: 10000, Runs: 3, MaxSurge: "25%", MaxUnavailable: "0", Timeout: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		change func(*WorkloadOptions)
		want   string
	}{
		{func(o *WorkloadOptions) { o.Replicas = 0 }, "--pods and --runs must be positive"},
		{func(o *WorkloadOptions) { o.Runs = 0 }, "--pods and --runs must be positive"},
		{func(o *WorkloadOptions) { o.Timeout = 0 }, "--timeout must be positive"},
		{func(o *WorkloadOptions) { o.MaxSurge = "lots" }, `--max-surge "lots": want a count or a percentage`},
		{func(o *WorkloadOptions) { o.MaxUnavailable = "-1" }, `--max-unavailable "-1": negative`},
		{func(o *WorkloadOptions) { o.MaxUnavailable = "x%" }, `--max-unavailable "x%"`},
		{func(o *WorkloadOptions) { o.Config, o.Profiles = "c.json", "/tmp/p" }, "--profile-dir profiles the system bench starts itself"},
	} {
		o := ok
		tc.change(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", o, err, tc.want)
		}
	}
}

// TestScaledValue: the rollout bounds the report checks are kube's
// (maxSurge's rounding up of a percentage).
func TestScaledValue(t *testing.T) {
	for in, want := range map[string]int{"25%": 2500, "10%": 1000, "0": 0, "3": 3, "0.5%": -1} {
		got, err := scaledValue(in, 10000)
		if want < 0 {
			if err == nil {
				t.Errorf("scaledValue(%q) = %d, want an error", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("scaledValue(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if got, _ := scaledValue("25%", 7); got != 2 {
		t.Errorf("25%% of 7 = %d, want 2 (rounded up)", got)
	}
}

// TestPodSlots: the pods the schedulable nodes hold, the cordoned ones
// left out.
func TestPodSlots(t *testing.T) {
	node := func(pods string, cordoned bool) v1.Node {
		return v1.Node{
			Spec:   v1.NodeSpec{Unschedulable: cordoned},
			Status: v1.NodeStatus{Allocatable: v1.ResourceList{v1.ResourcePods: resource.MustParse(pods)}},
		}
	}
	if got := podSlots([]v1.Node{node("110", false), node("110", false), node("50", true), {}}); got != 220 {
		t.Errorf("podSlots = %d, want 220", got)
	}
}

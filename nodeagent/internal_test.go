package nodeagent

import (
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
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

func TestQOSClass(t *testing.T) {
	res := func(req, lim map[string]string) *corev1.Container {
		return &corev1.Container{Name: "c", Resources: &corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	both := map[string]string{"cpu": "1", "memory": "1Gi"}
	tests := []struct {
		name string
		cs   []*corev1.Container
		want string
	}{
		{"no resources", []*corev1.Container{{Name: "c"}}, "BestEffort"},
		{"limits only", []*corev1.Container{res(nil, both)}, "Guaranteed"},
		{"equal in other units", []*corev1.Container{res(map[string]string{"cpu": "1000m", "memory": "1024Mi"}, both)}, "Guaranteed"},
		{"requests below limits", []*corev1.Container{res(map[string]string{"cpu": "500m"}, both)}, "Burstable"},
		{"requests only", []*corev1.Container{res(both, nil)}, "Burstable"},
		{"one container without", []*corev1.Container{res(nil, both), {Name: "d"}}, "Burstable"},
		{"cpu limit only", []*corev1.Container{res(nil, map[string]string{"cpu": "1"})}, "Burstable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := qosClass(&corev1.Pod{Spec: &corev1.PodSpec{Containers: tc.cs}}); got != tc.want {
				t.Errorf("qosClass = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPullPolicy(t *testing.T) {
	tests := []struct{ image, policy, want string }{
		{"nginx", "", "Always"},
		{"nginx:latest", "", "Always"},
		{"nginx:1.27", "", "IfNotPresent"},
		{"registry:5000/nginx", "", "Always"},
		{"registry:5000/nginx:1.27", "", "IfNotPresent"},
		{"nginx@sha256:abcd", "", "IfNotPresent"},
		{"nginx:latest", "Never", "Never"},
	}
	for _, tc := range tests {
		if got := pullPolicy(&corev1.Container{Image: tc.image, ImagePullPolicy: tc.policy}); got != tc.want {
			t.Errorf("pullPolicy(%q, %q) = %q, want %q", tc.image, tc.policy, got, tc.want)
		}
	}
}

func TestAllocatableAfterReserves(t *testing.T) {
	got := allocatable(map[string]string{"cpu": "2", "memory": "8Gi", "pods": "110"},
		map[string]string{"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "1Gi"})
	want := map[string]string{"cpu": "1900m", "memory": "7680Mi", "pods": "110"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("allocatable %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if _, ok := got["ephemeral-storage"]; ok {
		t.Errorf("reserved a resource the node does not have: %v", got)
	}
	if small := allocatable(map[string]string{"cpu": "100m"}, map[string]string{"cpu": "1"}); small["cpu"] != "0" {
		t.Errorf("allocatable below zero: %v", small)
	}
}

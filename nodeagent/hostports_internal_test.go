package nodeagent

import (
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestHostPortsRecordOnlyPortHolders: pods without host ports are admitted
// (again too) and held without an entry; a pod's host port still refuses
// a conflicting one, the pods without ports around it notwithstanding,
// and is free again once released.
func TestHostPortsRecordOnlyPortHolders(t *testing.T) {
	pod := func(hostPort int32) *corev1.Pod {
		c := &corev1.Container{Name: "c"}
		if hostPort > 0 {
			c.Ports = []*corev1.ContainerPort{{ContainerPort: 80, HostPort: hostPort}}
		}
		return &corev1.Pod{Spec: &corev1.PodSpec{Containers: []*corev1.Container{c}}}
	}
	h := newHostPorts()
	for _, uid := range []string{"a", "b", "a"} {
		if !h.admit(uid, pod(0)) {
			t.Fatalf("pod %s without host ports refused", uid)
		}
	}
	h.hold("c", pod(0))
	if len(h.held) != 0 {
		t.Errorf("pods without host ports recorded: %v", h.held)
	}
	if !h.admit("p1", pod(8080)) || !h.admit("p1", pod(8080)) {
		t.Fatal("the first holder of port 8080 refused")
	}
	if h.admit("p2", pod(8080)) {
		t.Error("a second pod admitted on host port 8080")
	}
	h.release("a") // a pod never recorded
	h.release("p1")
	if !h.admit("p2", pod(8080)) {
		t.Error("host port 8080 not free once its holder is released")
	}
	h.hold("p3", pod(8080)) // adopted: held whatever it conflicts with
	if len(h.held) != 2 {
		t.Errorf("held = %v, want p2 and p3", h.held)
	}
}

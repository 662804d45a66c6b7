package linux

import (
	"slices"
	"testing"

	"github.com/podflow/podflow/nodeagent/linux/network"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestHostPorts: a pod publishes its app containers' host ports with
// their protocol and host IP; init containers and ports without a host
// port publish nothing, nor does a hostNetwork pod.
func TestHostPorts(t *testing.T) {
	pd := &corev1.Pod{Spec: &corev1.PodSpec{
		InitContainers: []*corev1.Container{{Name: "init", Ports: []*corev1.ContainerPort{{ContainerPort: 1, HostPort: 1}}}},
		Containers: []*corev1.Container{
			{Name: "a", Ports: []*corev1.ContainerPort{{ContainerPort: 8080, HostPort: 80}, {ContainerPort: 9090}}},
			{Name: "b", Ports: []*corev1.ContainerPort{{ContainerPort: 53, HostPort: 5353, Protocol: "UDP", HostIp: "127.0.0.1"}}},
		},
	}}
	want := []network.HostPort{{HostPort: 80, ContainerPort: 8080}, {HostPort: 5353, ContainerPort: 53, Protocol: "UDP", HostIP: "127.0.0.1"}}
	if got := hostPorts(pd); !slices.Equal(got, want) {
		t.Fatalf("hostPorts = %v, want %v", got, want)
	}
	pd.Spec.HostNetwork = true
	if got := hostPorts(pd); got != nil {
		t.Fatalf("a hostNetwork pod publishes %v", got)
	}
}

package scheduler

import (
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
	"google.golang.org/protobuf/proto"
)

// AllocatedPodFor returns the accounting record of pod for a
// NodeAllocation: its requests (as PodRequests computes them) and the host
// ports of its containers.
func AllocatedPodFor(pod *corev1.Pod) (*corev1.AllocatedPod, error) {
	req, _, err := PodRequests(pod)
	if err != nil {
		return nil, fmt.Errorf("pod %q: %w", podName(pod), err)
	}
	ap := &corev1.AllocatedPod{
		Namespace:             pod.GetMetadata().GetNamespace(),
		Name:                  pod.GetMetadata().GetName(),
		MilliCpu:              req.MilliCPU,
		MemoryBytes:           req.Memory,
		EphemeralStorageBytes: req.EphemeralStorage,
	}
	for _, c := range pod.GetSpec().GetContainers() {
		for _, p := range c.GetPorts() {
			if p.GetHostPort() > 0 {
				ap.HostPorts = append(ap.HostPorts, proto.CloneOf(p))
			}
		}
	}
	return ap, nil
}

// MergeAllocation returns the record of node with pod accounted for, under
// PodKey(pod). alloc is not modified: the result is a copy (a new record
// when alloc is nil). It is idempotent: when the pod is already accounted
// for, it returns alloc itself and changed is false, so a repeated bind
// writes nothing.
func MergeAllocation(alloc *corev1.NodeAllocation, node string, pod *corev1.Pod) (out *corev1.NodeAllocation, changed bool, err error) {
	key := PodKey(pod)
	if _, ok := alloc.GetPods()[key]; ok {
		return alloc, false, nil
	}
	ap, err := AllocatedPodFor(pod)
	if err != nil {
		return nil, false, err
	}
	out = copyAllocation(alloc, node)
	out.Pods[key] = ap
	return out, true, nil
}

// ReleaseAllocation returns a copy of alloc without the pod keyed podKey;
// changed is false (and alloc returned) when it was not accounted for.
func ReleaseAllocation(alloc *corev1.NodeAllocation, podKey string) (out *corev1.NodeAllocation, changed bool) {
	if _, ok := alloc.GetPods()[podKey]; !ok {
		return alloc, false
	}
	out = copyAllocation(alloc, alloc.GetMetadata().GetName())
	delete(out.Pods, podKey)
	return out, true
}

// copyAllocation copies the record's metadata and pod map; the
// AllocatedPods themselves are shared, as neither function modifies them.
func copyAllocation(alloc *corev1.NodeAllocation, node string) *corev1.NodeAllocation {
	out := &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: node}}
	if m := alloc.GetMetadata(); m != nil {
		out.Metadata = proto.CloneOf(m)
	}
	out.Pods = make(map[string]*corev1.AllocatedPod, len(alloc.GetPods())+1)
	for k, v := range alloc.GetPods() {
		out.Pods[k] = v
	}
	return out
}

// CheckAllocationFit re-checks, against the stored record of what node's
// pods request, that pod fits: the pod count, cpu, memory,
// ephemeral-storage and host ports (NodeResourcesFit and NodePorts). It
// returns the reasons it does not, in Kubernetes' words, or none. A pod the
// record already accounts for fits (the bind is being repeated).
func CheckAllocationFit(node *corev1.Node, alloc *corev1.NodeAllocation, pod *corev1.Pod) ([]string, error) {
	if _, ok := alloc.GetPods()[PodKey(pod)]; ok {
		return nil, nil
	}
	var n NodeInfo
	if err := n.setNode(node); err != nil {
		return nil, err
	}
	for _, ap := range alloc.GetPods() {
		e := &podEntry{req: Resources{MilliCPU: ap.GetMilliCpu(), Memory: ap.GetMemoryBytes(), EphemeralStorage: ap.GetEphemeralStorageBytes()}}
		for _, p := range ap.GetHostPorts() {
			e.ports = append(e.ports, newHostPort(p))
		}
		n.addPod(e)
	}
	req, _, err := PodRequests(pod)
	if err != nil {
		return nil, fmt.Errorf("pod %q: %w", podName(pod), err)
	}
	if st := portsFit(podHostPorts(pod), n.usedPorts); st != nil {
		return st.Reasons(), nil
	}
	return fits(&req, &n).Reasons(), nil
}

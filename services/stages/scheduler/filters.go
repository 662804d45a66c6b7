package scheduler

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// Filter runs the default profile's PreFilter and Filter plugins for pod
// against one node and returns why the node cannot run the pod, in
// Kubernetes' words; none when it can. It is for describe and trace;
// Schedule does not call it.
func Filter(pod *corev1.Pod, n *framework.NodeInfo) ([]string, error) {
	fw, err := newFramework(DefaultConfig())
	if err != nil {
		return nil, err
	}
	var state framework.CycleState
	filters, st := fw.runPreFilter(&state, pod, nil, nil)
	if err := st.AsError(); err != nil && !st.IsRejected() {
		return nil, err
	}
	if st != nil {
		return st.Reasons(), nil
	}
	for _, f := range filters {
		if st := f.pl.Filter(&state, pod, n); st != nil {
			return st.Reasons(), nil
		}
	}
	return nil, nil
}

package scheduler

import (
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// pdbOf is what preemption reads of a stored PodDisruptionBudget
// (policy/v1): kube-scheduler's filterPodsWithPDBViolation takes a budget
// with no selector, an empty or an invalid one, to select no pod.
func pdbOf(u *corev1.Unstructured) (*framework.PDB, error) {
	k, err := manifest.ToKube(u)
	if err != nil {
		return nil, err
	}
	pdb, ok := k.(*policyv1.PodDisruptionBudget)
	if !ok {
		return nil, fmt.Errorf("scheduler: a stored PodDisruptionBudget decodes to %T", k)
	}
	b := &framework.PDB{Namespace: pdb.Namespace, Name: pdb.Name, DisruptionsAllowed: pdb.Status.DisruptionsAllowed}
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil && !sel.Empty() {
		b.Selector = sel
	}
	if len(pdb.Status.DisruptedPods) > 0 {
		b.DisruptedPods = make(map[string]bool, len(pdb.Status.DisruptedPods))
		for name := range pdb.Status.DisruptedPods {
			b.DisruptedPods[name] = true
		}
	}
	return b, nil
}

package scheduler

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// decodeInformedPod decodes a pod for the scheduler's pod informer. An
// unbound pod is kept in full: the scheduler schedules it, and binds by
// writing it back with its node. A bound pod is kept with only what the
// scheduler reads of it (compactBound): bound pods are nearly every pod of
// a cluster, and the scheduler never writes one from this copy (a
// preemption reads its victims from the store; a pod found bound is only
// announced, from its identity and node). A bound pod's bytes are pruned
// before decoding (pruneBoundPod): what compactBound drops is not decoded
// at all — most of a bound pod, and of the informer's CPU at saturation,
// where every bind and status write of every pod comes back to it.
func decodeInformedPod(kv *raftstore.KV, o objects.Object) error {
	if _, ok := o.(*corev1.Pod); ok {
		buf := pruneBufs.Get().(*[]byte)
		pruned, bound := pruneBoundPod((*buf)[:0], kv.Value)
		var err error
		if bound {
			err = objects.Decode(&raftstore.KV{Key: kv.Key, Value: pruned, ModRevision: kv.ModRevision}, o)
		}
		if cap(pruned) <= maxPooledPrune {
			*buf = pruned[:0]
			pruneBufs.Put(buf)
		}
		if bound {
			return err
		}
	}
	if err := objects.Decode(kv, o); err != nil {
		return err
	}
	if p, ok := o.(*corev1.Pod); ok && p.GetSpec().GetNodeName() != "" {
		compactBound(p)
	}
	return nil
}

// compactBound keeps, in place, only what the scheduler reads of a bound
// pod: its identity, labels, generation, creation and deletion (cache
// entry, deletion requests) and its trace annotations (the PodScheduled
// announced for a pod found bound continues its trace); its node, scheduler name, priority, affinity,
// overhead and its containers' names, resources, ports and restart policy
// (requests, host ports, sidecars, pod affinity); its phase, start time,
// nomination and the PodScheduled and DisruptionTarget conditions
// (terminal pods, preemption). Everything else (images, env, mounts,
// volumes, tolerations, annotations, owners, container statuses, managed
// fields) is dropped, and with it most of the pod's memory.
func compactBound(p *corev1.Pod) {
	md, spec, st := p.GetMetadata(), p.GetSpec(), p.GetStatus()
	p.Metadata = &corev1.ObjectMeta{
		Name: md.GetName(), Namespace: md.GetNamespace(), Uid: md.GetUid(), ResourceVersion: md.GetResourceVersion(),
		Generation: md.GetGeneration(), Labels: md.GetLabels(), CreationTimestamp: md.GetCreationTimestamp(),
		DeletionTimestamp: md.GetDeletionTimestamp(), DeletionGracePeriodSeconds: md.DeletionGracePeriodSeconds,
	}
	for _, k := range []string{stage.AnnotationTraceparent, stage.AnnotationRequestID} {
		if v, ok := md.GetAnnotations()[k]; ok {
			if p.Metadata.Annotations == nil {
				p.Metadata.Annotations = make(map[string]string, 2)
			}
			p.Metadata.Annotations[k] = v
		}
	}
	p.Spec = &corev1.PodSpec{
		NodeName: spec.GetNodeName(), SchedulerName: spec.GetSchedulerName(), Priority: spec.Priority,
		PreemptionPolicy: spec.PreemptionPolicy, Affinity: spec.GetAffinity(), Overhead: spec.GetOverhead(),
		Containers: compactContainers(spec.GetContainers()), InitContainers: compactContainers(spec.GetInitContainers()),
	}
	if st == nil {
		p.Status = nil
		return
	}
	var conds []*corev1.PodCondition
	for _, c := range st.GetConditions() {
		if t := c.GetType(); t == podrules.PodScheduled || t == framework.ConditionDisruptionTarget {
			conds = append(conds, c)
		}
	}
	p.Status = &corev1.PodStatus{Phase: st.GetPhase(), StartTime: st.GetStartTime(), NominatedNodeName: st.GetNominatedNodeName(), Conditions: conds}
}

func compactContainers(cs []*corev1.Container) []*corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]*corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = &corev1.Container{Name: c.GetName(), Resources: c.GetResources(), Ports: c.GetPorts(), RestartPolicy: c.GetRestartPolicy()}
	}
	return out
}

package endpoints

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// The pod watch: the stage keeps, of every pod, what decides whether and
// how it is an endpoint (kube's podEndpointsChanged) and what names it in
// an announcement — and nothing else, so a cache of every pod stays small
// and a pod write costs little to decode:
//
//   - metadata: identity, labels, deletionTimestamp, and of its
//     annotations the applied status seq and the trace's request id and
//     traceparent (stage.PodEvent);
//   - spec: nodeName, hostname, subdomain;
//   - status: podIP, podIPs and the Ready condition.
//
// A sync never reads these cached pods: it reads the namespace's pods
// from the store (linearizable), whole.

// watchedSpec and watchedStatus name the PodSpec and PodStatus fields
// the pod watch keeps.
var (
	watchedSpec   = []protoreflect.Name{"node_name", "hostname", "subdomain"}
	watchedStatus = []protoreflect.Name{"conditions", "pod_ip", "pod_ips"}
	// keptAnnotations are the annotations a watched pod keeps.
	keptAnnotations = []string{podrules.AnnotationStatusSeq, stage.AnnotationRequestID, stage.AnnotationTraceparent}
)

// podProjection maps a Pod's field numbers to the fields kept of it: nil
// keeps the field whole, a set keeps only those of its message's fields.
// Fields not in it are dropped.
var podProjection = func() map[protowire.Number]map[protowire.Number]bool {
	fields := (&corev1.Pod{}).ProtoReflect().Descriptor().Fields()
	sub := func(field string, names []protoreflect.Name) (protowire.Number, map[protowire.Number]bool) {
		fd := fields.ByName(protoreflect.Name(field))
		keep := map[protowire.Number]bool{}
		for _, n := range names {
			keep[fd.Message().Fields().ByName(n).Number()] = true
		}
		return fd.Number(), keep
	}
	spec, specKeep := sub("spec", watchedSpec)
	status, statusKeep := sub("status", watchedStatus)
	return map[protowire.Number]map[protowire.Number]bool{
		fields.ByName("metadata").Number(): nil,
		spec:                               specKeep,
		status:                             statusKeep,
	}
}()

// decodeWatchedPod decodes a stored pod as the pod watch keeps it.
func decodeWatchedPod(kv *raftstore.KV, obj objects.Object) error {
	b, err := project(kv.Value, podProjection)
	if err != nil {
		return fmt.Errorf("objects: decode %q: %w", kv.Key, err)
	}
	cut := *kv
	cut.Value = b
	if err := objects.Decode(&cut, obj); err != nil {
		return err
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("endpoints: decode %q: not a pod", kv.Key)
	}
	md := pod.Metadata
	var ann map[string]string
	for _, k := range keptAnnotations {
		if v, ok := md.Annotations[k]; ok {
			if ann == nil {
				ann = map[string]string{}
			}
			ann[k] = v
		}
	}
	md.Annotations, md.OwnerReferences, md.ManagedFields, md.Finalizers = ann, nil, nil, nil
	if st := pod.Status; st != nil {
		st.Conditions = slices.DeleteFunc(st.Conditions, func(c *corev1.PodCondition) bool { return c.GetType() != podrules.PodReady })
	}
	return nil
}

// project returns the encoding b of a message with only the fields keep
// names (a field given a set is cut to those of its own fields, merged
// into one if it was repeated), in their order.
func project(b []byte, keep map[protowire.Number]map[protowire.Number]bool) ([]byte, error) {
	out := make([]byte, 0, len(b))
	cut := map[protowire.Number][]byte{}
	var order []protowire.Number
	for len(b) > 0 {
		num, typ, tag := protowire.ConsumeTag(b)
		if tag < 0 {
			return nil, protowire.ParseError(tag)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[tag:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		field, n := b[:tag+m], tag+m
		b = b[n:]
		sub, ok := keep[num]
		switch {
		case !ok:
		case sub == nil || typ != protowire.BytesType:
			out = append(out, field...)
		default:
			v, _ := protowire.ConsumeBytes(field[tag:])
			if _, seen := cut[num]; !seen {
				order = append(order, num)
				cut[num] = []byte{}
			}
			for len(v) > 0 {
				fnum, ftyp, ftag := protowire.ConsumeTag(v)
				if ftag < 0 {
					return nil, protowire.ParseError(ftag)
				}
				fm := protowire.ConsumeFieldValue(fnum, ftyp, v[ftag:])
				if fm < 0 {
					return nil, protowire.ParseError(fm)
				}
				if sub[fnum] {
					cut[num] = append(cut[num], v[:ftag+fm]...)
				}
				v = v[ftag+fm:]
			}
		}
	}
	for _, num := range order {
		out = protowire.AppendTag(out, num, protowire.BytesType)
		out = protowire.AppendBytes(out, cut[num])
	}
	return out, nil
}

// endpointsChanged reports, as kube's podEndpointsChanged, whether a pod's
// change can change its endpoint (podChanged: readiness, termination, IP,
// node, DNS name) or which Services select it (labelsChanged).
func endpointsChanged(old, pod *corev1.Pod) (podChanged, labelsChanged bool) {
	labelsChanged = !maps.Equal(old.GetMetadata().GetLabels(), pod.GetMetadata().GetLabels())
	o, n := old.GetSpec(), pod.GetSpec()
	podChanged = (old.GetMetadata().GetDeletionTimestamp() == nil) != (pod.GetMetadata().GetDeletionTimestamp() == nil) ||
		podrules.IsPodReady(old) != podrules.IsPodReady(pod) ||
		old.GetStatus().GetPodIp() != pod.GetStatus().GetPodIp() ||
		!slices.EqualFunc(old.GetStatus().GetPodIps(), pod.GetStatus().GetPodIps(), func(a, b *corev1.PodIP) bool { return a.GetIp() == b.GetIp() }) ||
		o.GetNodeName() != n.GetNodeName() || o.GetHostname() != n.GetHostname() || o.GetSubdomain() != n.GetSubdomain()
	return podChanged, labelsChanged
}

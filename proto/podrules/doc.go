// Package podrules holds the Kubernetes rules about pods that more than one
// podflow component applies, in one place, so that the api stage, the other
// stages and the node agents cannot disagree. It depends only on the proto
// packages and on k8s.io/apimachinery's resource.Quantity (the quantity
// arithmetic Kubernetes itself uses), as Kubernetes keeps
// k8s.io/component-helpers apart from its servers.
//
// Each rule follows a Kubernetes source:
//
//   - QOSClass: pkg/apis/core/v1/helper/qos ComputePodQOS (cpu and memory
//     only, zero quantities ignored, a missing request defaulting to its
//     limit as API defaulting makes it).
//   - DefaultPullPolicy and PullPolicy: pkg/apis/core/v1/defaults.go
//     SetDefaults_Container (Always for the tag "latest" — also in
//     "nginx:latest@sha256:…" — and for a reference with neither tag nor
//     digest; IfNotPresent otherwise).
//   - PodCondition, SetPodCondition, MarkPodCondition, NodeCondition,
//     IsPodReady: pkg/api/v1/pod util.go GetPodCondition and
//     UpdatePodCondition (lastTransitionTime moves only when the status
//     changes), in the condition order the kubelet reports.
//   - NewEvent, EventName, PodRef, SetEventCause: the event recorder of
//     client-go tools/record (one Event per involved object, type, reason,
//     message and source, named "<object>.<suffix>").
//   - NamespaceOrDefault: metav1.NamespaceDefault, the namespace of a
//     request or object that names none.
//   - PodRequests and ContainerRequests: k8s.io/component-helpers resource
//     PodRequests (the larger of the sum over the containers plus sidecars
//     and, per resource, the largest init container plus the sidecars
//     started before it; PodResourcesOptions.NonMissingContainerRequests).
//   - PodLimits, ContainerLimits, QuantityValue and QuantityMilli:
//     pkg/kubelet/cm ResourceConfigForPod's pod-level cpu and memory
//     limits (the larger of the app containers' sum and the largest init
//     container, only when every container has one), which the node
//     agent's pod cgroup (linux.PlanPod) and a memory emptyDir's tmpfs
//     size (kubelet's calculateEmptyDirMemorySize) both read.
//   - SysctlNamespace: pkg/kubelet/sysctl NamespacedBy (the namespace a
//     sysctl belongs to: net, ipc, or none), for the node agent's sysctl
//     admission and the Linux container runtime's own spec check.
//   - AppliedSeq and AnnotationStatusSeq: podflow's own record of the last
//     node status report applied to a pod (no Kubernetes counterpart).
//
// Every function is pure: it reads its arguments, never the clock (callers
// pass the time), the store or the bus, and is safe for concurrent use.
//
// Example:
//
//	pod.Status.QosClass = podrules.QOSClass(pod)
//	for _, c := range pod.Spec.Containers {
//		if c.ImagePullPolicy == "" {
//			c.ImagePullPolicy = podrules.DefaultPullPolicy(c.Image)
//		}
//	}
//	podrules.MarkPodCondition(pod.Status, podrules.PodScheduled, podrules.ConditionTrue, "", "", timestamppb.Now())
package podrules

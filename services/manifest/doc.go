// Package manifest converts Kubernetes manifests (YAML or JSON) to
// podflow's proto objects (github.com/podflow/podflow/proto/corev1) and
// back, so that users apply the same files they would give kubectl.
//
// Decoding goes through the real Kubernetes types, never a hand-written
// YAML parser: YAML is turned into JSON by sigs.k8s.io/yaml, decoded
// strictly into the k8s.io/api type (an unknown or duplicate field is an
// error naming its path, as kubectl's --validate=strict), re-marshalled
// (which normalises quantities, IntOrString and times) and read into the
// proto with protojson, renaming the few fields whose proto JSON names
// differ from Kubernetes' (podIP/podIp, lastState/lastTerminationState,
// ...). A Pod field podflow does not keep is refused, naming its path
// (ErrUnsupportedField: "spec.shareProcessNamespace: Forbidden: podflow
// does not support a shared process namespace"), unless it is given its
// Kubernetes default (dnsPolicy: ClusterFirst, ...); every Pod field is on
// one of the two lists of fields.go, honoured or refused, and
// RefusedPodFields refuses the fields the proto keeps but podflow does not
// honour (admission calls it). Fields of other kinds that podflow does not
// keep are dropped with a warning.
//
// Kinds: v1 Pod, Node, Service, Endpoints, Namespace, ServiceAccount,
// ConfigMap, Secret, Event and LimitRange; discovery.k8s.io/v1
// EndpointSlice; rbac.authorization.k8s.io/v1 Role, ClusterRole,
// RoleBinding and ClusterRoleBinding; scheduling.k8s.io/v1 PriorityClass.
// A v1 List (or a JSON array) stands for its items. A Secret's stringData
// is merged into data, as the API server does.
//
// Callers must:
//
//  1. Treat a Decode error as the whole manifest refused: Decode returns
//     no objects with an error. Match errors with errors.Is against the
//     package sentinels (ErrUnknownField, ErrTooLarge, ...) and use
//     errors.As(err, &*Error) for the document, object and field path; an
//     error may join several *Error for one document.
//  2. Show Object.Warnings to the user: they name fields that were dropped
//     (kinds other than Pod) and, for a Pod, kube-apiserver's warnings
//     (PodWarnings: deprecated node labels and annotations). Answer an
//     ErrUnsupportedField with 422 Invalid: RefusedFields gives the pod's
//     name and one Forbidden field error per refused path.
//  3. Bound untrusted input with Config (WithConfig, WithMaxBytes): by
//     default a manifest over 3 MiB is refused before it is parsed, and a
//     YAML document whose aliases would expand to more than 100000 extra
//     nodes is refused before it is expanded.
//
// All functions are safe for concurrent use.
//
// Example:
//
//	objs, err := manifest.Decode(data)
//	if errors.Is(err, manifest.ErrUnknownField) {
//		var e *manifest.Error
//		errors.As(err, &e) // e.Field == "spec.containers[0].imagePullPolcy"
//	}
//	for _, o := range objs {
//		for _, w := range o.Warnings {
//			log.Printf("%s: %s", o.Kind, w)
//		}
//		pod, ok := o.Message.(*corev1.Pod) // podflow's proto
//		...
//	}
//	out, err := manifest.Encode(pod, manifest.FormatYAML) // apiVersion: v1, kind: Pod, ...
//	kpod, err := manifest.ToKube(pod)                      // *k8s.io/api/core/v1.Pod
package manifest

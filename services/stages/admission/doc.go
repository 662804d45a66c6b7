// Package admission is the decision core of podflow's admission stage:
// mutating admission (ServiceAccount: the name, for a pod naming
// none the account's imagePullSecrets, and the account's token as the
// projected kube-api-access- volume at
// /var/run/secrets/kubernetes.io/serviceaccount; LimitRange
// defaults, Kubernetes field defaults — restartPolicy,
// terminationGracePeriodSeconds, each container's imagePullPolicy,
// terminationMessagePath and terminationMessagePolicy, port protocols,
// probe timings, the file volumes' defaultMode 0644 — stored, so `get -o
// yaml` shows them, QoS class)
// followed by validation (the pod schema with the file volumes' items
// as kube-apiserver checks them, LimitRange min/max, the Pod Security Standards of
// the pod's namespace, then the fields podflow refuses —
// manifest.RefusedPodFields, issue 16 — with 422 naming each path).
// It does no I/O: Admit is a pure function of the pod and a State the
// stage reads from the store, and its rejections are *corev1.Status values
// the stage publishes as they are.
//
// Callers' obligations:
//
//  1. Read the pod's Namespace, its ServiceAccount and its LimitRanges
//     into a State (objects of other namespaces are ignored); set
//     State.Config to the cluster's Config, validated once at start-up with
//     Config.Validate.
//  2. Publish Result.Pod (a copy: the input pod is never modified) with
//     Result.Mutations when Result.Allowed(); otherwise reject with
//     Result.Status: 422 Invalid (schema, refused fields), 403 Forbidden (LimitRange min or
//     max), 403 PolicyViolation (Pod Security), 400 BadRequest (no pod),
//     500 InternalError (bad Config).
//     Receivers match a Status by Reason, never by Message.
//  3. Expect Admit to be idempotent: admitting an admitted pod with the same
//     State returns an equal pod and no mutations, so a redelivered event
//     may be handled again.
//
// Pod Security is upstream's policy library, through services/podsecurity,
// which the front door also calls on pod updates and ephemeral containers.
// ValidatePod, CheckPodSecurity and LevelFor are exported for tools. The
// pod rules admission shares with the node agent and the other stages (QoS
// class, default pull policy) live in proto/podrules.
//
// The validation of every other kind (names, namespaces, ConfigMap and
// Secret sizes) is package validate's Object, which the api stage calls;
// ValidatePod builds on the same helpers.
//
// Example:
//
//	res := admission.Admit(req.GetPod(), admission.State{
//		Namespace:       ns,
//		LimitRanges:     limitRanges,
//		Config:          cfg,
//	})
//	if !res.Allowed() {
//		return reject(res.Status)
//	}
//	return publish(&eventsv1.PodAdmitted{Pod: res.Pod, User: user, Mutations: res.Mutations})
package admission

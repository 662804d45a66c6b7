// Package podsecurity enforces the Pod Security Standards as
// kube-apiserver's PodSecurity admission does, with the upstream policy
// library (k8s.io/pod-security-admission/policy): the same checks, the
// same levels and versions, the same refusal message.
//
// Every write path that can add or change a container calls it:
//
//  1. a pod's creation (the admission stage: Check);
//  2. an update of a pod (the HTTPS front door's PUT and PATCH, and
//     pods/ephemeralcontainers: CheckUpdate), evaluated only when it is
//     significant as upstream's isSignificantPodUpdate says — a container
//     added, removed or given another image;
//
// and a new pod subresource that writes the spec must call CheckUpdate too
// (services' layering test keeps a list: a subresource is either ignored
// as upstream's ignoredPodSubresources, or checked).
//
// The level comes from the namespace's pod-security.kubernetes.io/enforce
// label (and enforce-version), else from the cluster's default (Config's
// Default, kube-apiserver's PodSecurity admission configuration
// defaults.enforce; privileged unless set). An invalid label enforces
// restricted, as upstream: a typo does not open a namespace.
package podsecurity

import (
	"errors"
	"fmt"

	corev1k "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/manifest"
)

// Level is a Pod Security Standards level.
type Level = psapi.Level

// The levels, and the namespace label choosing one.
const (
	LevelPrivileged = psapi.LevelPrivileged
	LevelBaseline   = psapi.LevelBaseline
	LevelRestricted = psapi.LevelRestricted

	// LabelEnforce on a Namespace sets the level its pods must meet.
	LabelEnforce = psapi.EnforceLevelLabel
	// LabelEnforceVersion pins the version of the level ("v1.30",
	// default "latest").
	LabelEnforceVersion = psapi.EnforceVersionLabel
)

// ErrInvalidLevel is wrapped by ParseLevel.
var ErrInvalidLevel = errors.New("podsecurity: invalid level")

// ParseLevel parses a level name; "" is privileged (Kubernetes' default).
func ParseLevel(s string) (Level, error) {
	if s == "" {
		return LevelPrivileged, nil
	}
	l, err := psapi.ParseLevel(s)
	if err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrInvalidLevel, s, err)
	}
	return l, nil
}

// evaluator runs upstream's checks at every version.
var evaluator = func() policy.Evaluator {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(fmt.Sprintf("podsecurity: upstream checks: %v", err))
	}
	return e
}()

// Enforced returns the level and version enforced in ns: its labels, else
// def at the latest version (def "" is privileged). ns nil has no labels.
func Enforced(ns *corev1.Namespace, def Level) psapi.LevelVersion {
	if def == "" {
		def = LevelPrivileged
	}
	defaults := psapi.Policy{
		Enforce: psapi.LevelVersion{Level: def, Version: psapi.LatestVersion()},
		Audit:   psapi.LevelVersion{Level: LevelPrivileged, Version: psapi.LatestVersion()},
		Warn:    psapi.LevelVersion{Level: LevelPrivileged, Version: psapi.LatestVersion()},
	}
	p, _ := psapi.PolicyToEvaluate(ns.GetMetadata().GetLabels(), defaults) // errors fail closed: restricted
	return p.Enforce
}

// Latest is lv at the latest version of level.
func Latest(level Level) psapi.LevelVersion {
	return psapi.LevelVersion{Level: level, Version: psapi.LatestVersion()}
}

// Check evaluates pod at lv and returns nil when it complies, else the 403
// kube-apiserver answers, e.g.
//
//	pods "web" is forbidden: violates PodSecurity "baseline:latest": privileged (container "app" must not set securityContext.privileged=true)
//
// with podflow's reason code PolicyViolation. A pod that cannot be
// converted to its Kubernetes form is refused (500), never let through.
func Check(pod *corev1.Pod, lv psapi.LevelVersion) *corev1.Status {
	if lv.Level == LevelPrivileged {
		return nil
	}
	name := pod.GetMetadata().GetName()
	k, err := toKube(pod)
	if err != nil {
		return &corev1.Status{Status: "Failure", Code: 500, Reason: eventsv1.ReasonInternalError, Kind: "Pod", Name: name,
			Message: fmt.Sprintf("PodSecurity: %v", err)}
	}
	res := policy.AggregateCheckResults(evaluator.EvaluatePod(lv, &k.ObjectMeta, &k.Spec))
	if res.Allowed {
		return nil
	}
	st := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, name,
		fmt.Errorf("violates PodSecurity %q: %s", lv.String(), res.ForbiddenDetail())).ErrStatus
	return &corev1.Status{Status: "Failure", Code: st.Code, Reason: eventsv1.ReasonPolicyViolation, Kind: "Pod", Name: name,
		Message: st.Message}
}

// CheckUpdate is Check for an update from old to pod: nil when the update
// is not significant (SignificantUpdate), else pod's evaluation.
func CheckUpdate(old, pod *corev1.Pod, lv psapi.LevelVersion) *corev1.Status {
	if lv.Level == LevelPrivileged || !SignificantUpdate(old, pod) {
		return nil
	}
	return Check(pod, lv)
}

// SignificantUpdate reports whether an update from old to pod must be
// evaluated, as upstream's isSignificantPodUpdate
// (k8s.io/pod-security-admission/admission): a container or init
// container added or removed, an image changed, an ephemeral container
// added or its image changed.
func SignificantUpdate(old, pod *corev1.Pod) bool {
	o, n := old.GetSpec(), pod.GetSpec()
	if len(n.GetContainers()) != len(o.GetContainers()) || len(n.GetInitContainers()) != len(o.GetInitContainers()) {
		return true
	}
	for i, c := range n.GetContainers() {
		if c.GetImage() != o.GetContainers()[i].GetImage() {
			return true
		}
	}
	for i, c := range n.GetInitContainers() {
		if c.GetImage() != o.GetInitContainers()[i].GetImage() {
			return true
		}
	}
	for _, c := range n.GetEphemeralContainers() {
		var oc *corev1.EphemeralContainer
		for _, x := range o.GetEphemeralContainers() {
			if x.GetName() == c.GetName() {
				oc = x
				break
			}
		}
		if oc == nil || oc.GetImage() != c.GetImage() {
			return true
		}
	}
	return false
}

func toKube(pod *corev1.Pod) (*corev1k.Pod, error) {
	o, err := manifest.ToKube(pod)
	if err != nil {
		return nil, err
	}
	k, ok := o.(*corev1k.Pod)
	if !ok {
		return nil, fmt.Errorf("pod converts to %T", o)
	}
	return k, nil
}

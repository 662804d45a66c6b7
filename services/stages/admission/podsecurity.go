package admission

import (
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/podsecurity"
)

// Level is a Pod Security Standards level.
type Level = podsecurity.Level

// Pod Security Standards levels and the namespace label choosing one.
const (
	LevelPrivileged = podsecurity.LevelPrivileged
	LevelBaseline   = podsecurity.LevelBaseline
	LevelRestricted = podsecurity.LevelRestricted

	// LabelEnforce on a Namespace sets the level its pods must meet.
	LabelEnforce = podsecurity.LabelEnforce
)

// LevelFor returns the level enforced in a namespace: its enforce label,
// or cfg.DefaultLevel (privileged if unset) without one. An unknown label
// value enforces restricted, as Kubernetes' PodSecurity admission does:
// a typo must not open the namespace up.
func LevelFor(ns *corev1.Namespace, cfg Config) Level {
	return podsecurity.Enforced(ns, cfg.DefaultLevel).Level
}

// CheckPodSecurity evaluates the pod against the Pod Security Standards at
// level (latest version) with upstream's checks (services/podsecurity) and
// returns nil when it complies, else a 403 PolicyViolation Status worded
// as Kubernetes' PodSecurity admission, e.g.
//
//	pods "web" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "app" must set securityContext.allowPrivilegeEscalation=false)
func CheckPodSecurity(pod *corev1.Pod, level Level) *corev1.Status {
	return podsecurity.Check(pod, podsecurity.Latest(level))
}

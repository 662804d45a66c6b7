package apiserver

import (
	"context"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/podsecurity"
	"github.com/podflow/podflow/services/stage"
)

// checkPodSecurity evaluates an update of a pod from cur to next against
// the Pod Security level of the pod's namespace (its enforce label, else
// Config.PodSecurityDefault), as kube-apiserver's PodSecurity admission
// does for a pod update or pods/ephemeralcontainers: only an update that
// adds a container or changes an image is evaluated
// (podsecurity.SignificantUpdate), and then the whole new pod. Every
// front-door path that writes a pod's containers calls it.
func (s *Server) checkPodSecurity(ctx context.Context, cur, next *corev1.Pod) *corev1.Status {
	if !podsecurity.SignificantUpdate(cur, next) {
		return nil
	}
	ns, err := nslifecycle.Get(ctx, s.store, cur.GetMetadata().GetNamespace())
	if err != nil {
		return stage.Internal(err)
	}
	return podsecurity.Check(next, podsecurity.Enforced(ns, s.cfg.PodSecurityDefault))
}

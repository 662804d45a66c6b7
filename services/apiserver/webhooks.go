package apiserver

import (
	"context"
	"net/http"
	"strconv"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/webhook"
)

// WebhookBackend is a Backend that also runs dynamic admission (the api
// stage): the front door asks it for the writes it makes itself — pod
// updates and CONNECTs (attach, exec, portforward) — as kube-apiserver's
// handlers call admission. A nil Admitter: none configured.
type WebhookBackend interface {
	Webhooks() webhook.Admitter
}

// webhooks is the backend's dynamic admission, or nil.
func (s *Server) webhooks() webhook.Admitter {
	if b, ok := s.backend.(WebhookBackend); ok {
		return b.Webhooks()
	}
	return nil
}

// admitConnect runs the webhooks and policies on a CONNECT to pod through
// req.sub, with its options object, as kube-apiserver's connect handler.
func (s *Server) admitConnect(r *http.Request, req *request, pod *corev1.Pod) *corev1.Status {
	adm := s.webhooks()
	if adm == nil {
		return nil
	}
	q := r.URL.Query()
	b := func(k string) bool { v, _ := strconv.ParseBool(q.Get(k)); return v }
	var opts runtime.Object
	switch req.sub {
	case "attach":
		opts = &k8scorev1.PodAttachOptions{Stdin: b("stdin"), Stdout: b("stdout"), Stderr: b("stderr"), TTY: b("tty"), Container: q.Get("container")}
	case "exec":
		opts = &k8scorev1.PodExecOptions{Stdin: b("stdin"), Stdout: b("stdout"), Stderr: b("stderr"), TTY: b("tty"), Container: q.Get("container"),
			Command: q["command"]}
	default:
		pf := &k8scorev1.PodPortForwardOptions{}
		for _, p := range q["ports"] {
			if n, err := strconv.ParseInt(p, 10, 32); err == nil {
				pf.Ports = append(pf.Ports, int32(n))
			}
		}
		opts = pf
	}
	wr := &webhook.Request{Operation: webhook.Connect, Kind: objects.Pods, Subresource: req.sub, Namespace: req.namespace,
		Name: req.name, ConnectOptions: opts, User: req.user}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	if res := adm.Mutate(ctx, wr); !res.Allowed() {
		return res.Status
	}
	return adm.Validate(ctx, wr).Status
}

// admitPodUpdate runs the mutating webhooks on an update of current to
// pod, before the front door's own checks: the pod as they left it.
func (s *Server) mutatePodUpdate(ctx context.Context, user *corev1.UserInfo, current, pod *corev1.Pod, dry bool) (*corev1.Pod, []string, *corev1.Status) {
	adm := s.webhooks()
	if adm == nil {
		return pod, nil, nil
	}
	md := current.GetMetadata()
	res := adm.Mutate(ctx, &webhook.Request{Operation: webhook.Update, Kind: objects.Pods, Namespace: md.GetNamespace(), Name: md.GetName(),
		Object: pod, OldObject: current, DryRun: dry, User: user})
	if !res.Allowed() {
		return nil, res.Warnings, res.Status
	}
	out, ok := res.Object.(*corev1.Pod)
	if !ok {
		return pod, res.Warnings, nil
	}
	return out, res.Warnings, nil
}

// validatePodUpdate runs the policies and validating webhooks on the pod
// an update will store.
func (s *Server) validatePodUpdate(ctx context.Context, user *corev1.UserInfo, current, next *corev1.Pod, dry bool) ([]string, *corev1.Status) {
	adm := s.webhooks()
	if adm == nil {
		return nil, nil
	}
	md := current.GetMetadata()
	res := adm.Validate(ctx, &webhook.Request{Operation: webhook.Update, Kind: objects.Pods, Namespace: md.GetNamespace(), Name: md.GetName(),
		Object: next, OldObject: current, DryRun: dry, User: user})
	return res.Warnings, res.Status
}

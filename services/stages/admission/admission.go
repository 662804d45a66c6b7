package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/podsecurity"
	"github.com/podflow/podflow/services/validate"
	"github.com/podflow/podflow/services/webhook"
)

// ErrInvalidConfig is wrapped by Config.Validate.
var ErrInvalidConfig = errors.New("admission: invalid config")

// Config holds the cluster-wide admission settings.
type Config struct {
	// DefaultLevel is the Pod Security Standards level enforced in a
	// namespace without the pod-security.kubernetes.io/enforce label.
	// Default LevelPrivileged, as Kubernetes. The zero value means the
	// default.
	DefaultLevel Level
	// NotReadyTolerationSeconds and UnreachableTolerationSeconds are the
	// tolerationSeconds of the tolerations of the node.kubernetes.io/not-ready
	// and unreachable NoExecute taints added to every pod that has none
	// (kube-apiserver's DefaultTolerationSeconds plugin and its
	// --default-not-ready-toleration-seconds and
	// --default-unreachable-toleration-seconds). nil: 300.
	NotReadyTolerationSeconds, UnreachableTolerationSeconds *int64
	// Webhooks, when set, runs the admission webhooks and policies
	// (services/webhook/kube) around the built-in admission, as
	// kube-apiserver orders them; nil: none.
	Webhooks webhook.Admitter
	// WebhookConfigWait bounds how long a pod waits for the stage's
	// webhook configurations and policies to reach the store revision the
	// api stage's had reached when it accepted the pod
	// (PodAuthorized.admission_revision; Webhooks implementing
	// webhook.Revisioned). Past it the pod is refused with 503
	// ServiceUnavailable rather than admitted without a webhook the api
	// already calls. 0: DefaultWebhookConfigWait.
	WebhookConfigWait time.Duration
	// Quota charges each admitted pod to its namespace's ResourceQuotas
	// (services/quota's *Admission, which links k8s.io/kubernetes), after
	// every other check, before the pod is published to persistence. Nil:
	// ResourceQuotas are not enforced. Admit (the pure function) ignores
	// it; the Stage calls it.
	Quota Quota
}

// Quota is ResourceQuota admission of a pod: Admit charges pod's usage
// to the quotas of its namespace, or refuses it (kube's 403 "exceeded
// quota: ..."). The api stage's Quota interface is the same.
type Quota interface {
	Admit(ctx context.Context, user *corev1.UserInfo, kind objects.Kind, op string, obj, old objects.Object) *corev1.Status
}

// QuotaReader is a Quota whose read of a namespace's quotas can be made
// apart from the charge (services/quota's *Admission): the Stage starts
// the read when it starts admitting a pod, beside its read of the
// LimitRanges, so that a pod waits for one store read, not one after the
// other.
type QuotaReader interface {
	Quota
	// Read returns ns's quotas from a store read that starts after the
	// call.
	Read(ctx context.Context, ns string) ([]objects.Object, error)
	// AdmitRead is Admit with the quotas a Read returned.
	AdmitRead(ctx context.Context, user *corev1.UserInfo, kind objects.Kind, op string, obj, old objects.Object, stored []objects.Object) *corev1.Status
}

// DefaultTolerationSeconds is the default of Config.NotReadyTolerationSeconds
// and UnreachableTolerationSeconds, kube-apiserver's.
const DefaultTolerationSeconds = int64(300)

// DefaultWebhookConfigWait is the default of Config.WebhookConfigWait:
// informers over the store follow a write within milliseconds; ten
// seconds behind means the stage cannot watch the store.
const DefaultWebhookConfigWait = 10 * time.Second

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config { return Config{DefaultLevel: LevelPrivileged} }

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.WebhookConfigWait < 0 {
		return fmt.Errorf("%w: WebhookConfigWait %s is negative", ErrInvalidConfig, c.WebhookConfigWait)
	}
	switch c.DefaultLevel {
	case "", LevelPrivileged, LevelBaseline, LevelRestricted:
		return nil
	}
	return fmt.Errorf("%w: DefaultLevel %q is not one of privileged, baseline, restricted", ErrInvalidConfig, c.DefaultLevel)
}

// State is what admission needs to know about the cluster to admit a pod,
// read by the caller from the store. Objects from other namespaces than
// the pod's are ignored.
type State struct {
	// Namespace is the pod's namespace; its labels choose the Pod Security
	// level. nil means no labels.
	Namespace *corev1.Namespace
	// LimitRanges of the pod's namespace, applied in name order.
	LimitRanges []*corev1.LimitRange
	// ServiceAccount is the pod's ServiceAccount (spec.serviceAccountName,
	// "default" when unset, in the pod's namespace); nil when there is
	// none. Its imagePullSecrets are copied into a pod that sets none, and
	// its token is mounted unless the pod or the account opts out
	// (automountServiceAccountToken: false), as Kubernetes' ServiceAccount
	// admission plugin does.
	ServiceAccount *corev1.ServiceAccount
	// PriorityClasses are the cluster's PriorityClass objects, which
	// resolve spec.priorityClassName into spec.priority (the built-in
	// system-cluster-critical and system-node-critical need none).
	PriorityClasses []*corev1.PriorityClass
	// RuntimeClass is the RuntimeClass the pod names
	// (spec.runtimeClassName); nil when it names none or none exists by
	// that name (the pod is then refused, as Kubernetes' RuntimeClass
	// admission plugin refuses it).
	RuntimeClass *RuntimeClass
	// Config is the cluster-wide configuration; its zero value means
	// DefaultConfig().
	Config Config
}

// Result is the outcome of Admit.
type Result struct {
	// Pod is the mutated copy of the input pod. It is set even when the
	// pod is rejected, so that a dry run can show what would have been
	// stored.
	Pod *corev1.Pod
	// Mutations lists, in order, what mutating admission changed; empty
	// when the input was already fully defaulted.
	Mutations []string
	// Status is nil when the pod is admitted; otherwise 422 Invalid (schema
	// validation), 403 Forbidden (a LimitRange's min or max), 403
	// PolicyViolation (Pod Security Standards), 400 BadRequest (no pod) or
	// 500 InternalError (invalid Config).
	Status *corev1.Status
}

// Allowed reports whether the pod was admitted.
func (r Result) Allowed() bool { return r.Status == nil }

// Admit runs mutating admission and then validation over a copy of pod;
// pod itself is never modified. Admit is a pure function: the same pod and
// State always give the same Result, and admitting an admitted pod changes
// nothing (Admit(Admit(p).Pod) leaves the pod equal and lists no
// mutations), so a handler may run twice.
//
// Mutation order: ServiceAccount defaulting (the name, the
// ServiceAccount's imagePullSecrets into a pod without any, and the
// kube-api-access- token volume mounted in every container), requests
// from limits, LimitRange defaults, field defaults, QoS class, priority
// (spec.priority from spec.priorityClassName or the global default
// PriorityClass; an unknown class or a conflicting spec.priority is 403
// Forbidden, before validation, as Kubernetes' Priority plugin), then the
// RuntimeClass (its overhead, node selector and tolerations; an unknown
// class is 403 Forbidden, as Kubernetes' RuntimeClass plugin).
// Validation, each step only for a pod that passed the previous one: the
// schema (422 Invalid), LimitRange min and max per container (403
// Forbidden), Pod Security Standards (403 PolicyViolation), then the fields podflow
// refuses (422 Invalid naming each, manifest.RefusedPodFields).
func Admit(pod *corev1.Pod, s State) Result {
	if pod == nil {
		return Mutate(pod, s)
	}
	return admitOwned(vt.Clone(pod), s)
}

// admitOwned is Admit over a pod the caller gives away (a delivery's own,
// decoded for it alone): it is mutated in place, not copied.
func admitOwned(p *corev1.Pod, s State) Result {
	res := mutateOwned(p, s)
	if !res.Allowed() {
		return res
	}
	res.Status = Validate(res.Pod, s)
	return res
}

// Mutate runs mutating admission alone over a copy of pod (Admit's first
// half): the result's Status is set only for a pod that cannot be
// mutated (no pod, a bad Config, an unknown PriorityClass). Like Admit it
// is pure and idempotent, so it may run again over its own output (a
// webhook reinvocation).
func Mutate(pod *corev1.Pod, s State) Result {
	if pod == nil {
		return Result{Status: &corev1.Status{Status: "Failure", Code: 400, Reason: eventsv1.ReasonBadRequest,
			Message: "admission: no pod in request", Kind: "Pod"}}
	}
	return mutateOwned(vt.Clone(pod), s)
}

// mutateOwned is Mutate over a pod the caller gives away: it is mutated
// in place, not copied.
func mutateOwned(p *corev1.Pod, s State) Result {
	if p == nil {
		return Mutate(p, s)
	}
	cfg := s.config()
	if err := cfg.Validate(); err != nil {
		return Result{Pod: p, Status: &corev1.Status{Status: "Failure", Code: 500, Reason: eventsv1.ReasonInternalError,
			Message: err.Error(), Kind: "Pod", Name: p.GetMetadata().GetName()}}
	}
	ns := p.GetMetadata().GetNamespace()
	m := &mutator{pod: p}
	m.serviceAccount(s.ServiceAccount)
	m.serviceAccountToken(s.ServiceAccount)
	m.requestsFromLimits()
	for _, lr := range sortedByName(s.LimitRanges, ns) {
		m.limitRange(lr)
	}
	m.defaults()
	m.defaultTolerationSeconds(cfg.NotReadyTolerationSeconds, cfg.UnreachableTolerationSeconds)
	m.qos()
	st := m.resolvePriority(s.PriorityClasses)
	if st == nil {
		st = m.runtimeClass(s.RuntimeClass)
	}
	return Result{Pod: p, Mutations: m.applied, Status: st}
}

// Validate runs validation alone over a mutated pod (Admit's second
// half): nil when the pod is admitted, else the Status refusing it.
func Validate(p *corev1.Pod, s State) *corev1.Status {
	cfg := s.config()
	ns := p.GetMetadata().GetNamespace()
	if st := ValidatePod(p); st != nil {
		return st
	}
	if st := validateOverhead(p, s.RuntimeClass); st != nil {
		return st
	}
	if st := checkLimitRanges(p, sortedByName(s.LimitRanges, ns)); st != nil {
		return st
	}
	// The namespace's enforce level and version, else the cluster's default.
	if st := podsecurity.Check(p, podsecurity.Enforced(s.Namespace, cfg.DefaultLevel)); st != nil {
		return st
	}
	// Last: a pod Kubernetes would admit is still refused if it uses a
	// field podflow cannot honour (issue 16), naming each.
	if errs := manifest.RefusedPodFields(p); len(errs) > 0 {
		return validate.InvalidStatus("Pod", p.GetMetadata().GetName(), errs)
	}
	return nil
}

// config is s.Config with its defaults.
func (s State) config() Config {
	cfg := s.Config
	if cfg.DefaultLevel == "" {
		cfg.DefaultLevel = DefaultConfig().DefaultLevel
	}
	return cfg
}

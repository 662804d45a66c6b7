package auth

// RBAC escalation prevention, as Kubernetes' pkg/registry/rbac does it: a
// user may write a Role or ClusterRole only when its own rules cover every
// rule in it (ConfirmNoEscalation, with component-helpers' Covers), unless
// it may `escalate` on that role; and a RoleBinding or ClusterRoleBinding
// only when its rules, in the binding's namespace, cover the referenced
// role's (or it may `bind` that role). Superusers skip both checks
// (EscalationAllowed).

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
)

// RBACGroup is the API group of the RBAC kinds.
const RBACGroup = "rbac.authorization.k8s.io"

// Verbs that RBAC itself defines for role writes.
const (
	// VerbEscalate on roles or clusterroles lets a user write rules it
	// does not hold.
	VerbEscalate = "escalate"
	// VerbBind on a role or clusterrole (by name, or all) lets a user
	// bind it without holding its rules.
	VerbBind = "bind"
)

// Covers reports whether ownerRules cover servantRules, and lists the
// servant rules, broken down to one verb, group, resource and resource
// name (or one non-resource URL) each, that no owner rule covers. It is
// component-helpers/auth/rbac/validation.Covers.
func Covers(ownerRules, servantRules []*corev1.PolicyRule) (bool, []*corev1.PolicyRule) {
	var uncovered []*corev1.PolicyRule
	for _, servant := range servantRules {
		for _, sub := range BreakdownRule(servant) {
			if !slices.ContainsFunc(ownerRules, func(owner *corev1.PolicyRule) bool { return ruleCovers(owner, sub) }) {
				uncovered = append(uncovered, sub)
			}
		}
	}
	return len(uncovered) == 0, uncovered
}

// BreakdownRule splits a rule into equivalent rules of at most one verb,
// API group, resource and resource name each; non-resource URLs combine
// with verbs only.
func BreakdownRule(rule *corev1.PolicyRule) []*corev1.PolicyRule {
	var out []*corev1.PolicyRule
	for _, group := range rule.GetApiGroups() {
		for _, resource := range rule.GetResources() {
			for _, verb := range rule.GetVerbs() {
				if len(rule.GetResourceNames()) == 0 {
					out = append(out, &corev1.PolicyRule{ApiGroups: []string{group}, Resources: []string{resource}, Verbs: []string{verb}})
					continue
				}
				for _, name := range rule.GetResourceNames() {
					out = append(out, &corev1.PolicyRule{ApiGroups: []string{group}, Resources: []string{resource}, Verbs: []string{verb}, ResourceNames: []string{name}})
				}
			}
		}
	}
	for _, url := range rule.GetNonResourceUrls() {
		for _, verb := range rule.GetVerbs() {
			out = append(out, &corev1.PolicyRule{NonResourceUrls: []string{url}, Verbs: []string{verb}})
		}
	}
	return out
}

// ruleCovers reports whether owner (any rule) covers sub (a rule broken
// down by BreakdownRule).
func ruleCovers(owner, sub *corev1.PolicyRule) bool {
	verbs := slices.Contains(owner.GetVerbs(), All) || hasAll(owner.GetVerbs(), sub.GetVerbs())
	groups := slices.Contains(owner.GetApiGroups(), All) || hasAll(owner.GetApiGroups(), sub.GetApiGroups())
	resources := resourceCoversAll(owner.GetResources(), sub.GetResources())
	urls := nonResourceURLsCoverAll(owner.GetNonResourceUrls(), sub.GetNonResourceUrls())
	names := len(owner.GetResourceNames()) == 0 ||
		(len(sub.GetResourceNames()) > 0 && hasAll(owner.GetResourceNames(), sub.GetResourceNames()))
	return verbs && groups && resources && names && urls
}

func hasAll(set, contains []string) bool {
	for _, s := range contains {
		if !slices.Contains(set, s) {
			return false
		}
	}
	return true
}

// resourceCoversAll: "*", an exact match, or "*/<sub>" for a subresource.
func resourceCoversAll(set, covers []string) bool {
	if slices.Contains(set, All) || hasAll(set, covers) {
		return true
	}
	for _, path := range covers {
		if slices.Contains(set, path) {
			continue
		}
		_, sub, ok := strings.Cut(path, "/")
		if !ok || !slices.Contains(set, "*/"+sub) {
			return false
		}
	}
	return true
}

// nonResourceURLsCoverAll: an exact match or a prefix ending in "*".
func nonResourceURLsCoverAll(set, covers []string) bool {
	for _, path := range covers {
		if !slices.ContainsFunc(set, func(owner string) bool {
			return owner == path || (strings.HasSuffix(owner, "*") && strings.HasPrefix(path, strings.TrimRight(owner, "*")))
		}) {
			return false
		}
	}
	return true
}

// CompactRules merges rules of one API group and one resource (and at
// most one resource name, no non-resource URLs) that differ only by verb,
// as Kubernetes does for the escalation message. Order of first
// appearance is kept.
func CompactRules(rules []*corev1.PolicyRule) []*corev1.PolicyRule {
	type simple struct {
		group, resource, name string
		named                 bool
	}
	var out []*corev1.PolicyRule
	merged := map[simple]*corev1.PolicyRule{}
	for _, r := range rules {
		if len(r.GetResourceNames()) > 1 || len(r.GetNonResourceUrls()) > 0 || len(r.GetApiGroups()) != 1 || len(r.GetResources()) != 1 {
			out = append(out, r)
			continue
		}
		k := simple{group: r.GetApiGroups()[0], resource: r.GetResources()[0]}
		if len(r.GetResourceNames()) == 1 {
			k.name, k.named = r.GetResourceNames()[0], true
		}
		if m, ok := merged[k]; ok {
			m.Verbs = append(m.Verbs, r.GetVerbs()...)
			continue
		}
		m := proto.CloneOf(r)
		merged[k] = m
		out = append(out, m)
	}
	return out
}

// CompactString is Kubernetes' PolicyRule.CompactString, e.g.
//
//	{APIGroups:[""], Resources:["pods"], Verbs:["create" "delete"]}
func CompactString(r *corev1.PolicyRule) string {
	var parts []string
	add := func(label string, v []string) {
		if len(v) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", label, v))
		}
	}
	add("APIGroups", r.GetApiGroups())
	add("Resources", r.GetResources())
	add("NonResourceURLs", r.GetNonResourceUrls())
	add("ResourceNames", r.GetResourceNames())
	add("Verbs", r.GetVerbs())
	return "{" + strings.Join(parts, ", ") + "}"
}

// EscalationAllowed reports whether user is a superuser, who may write any
// role or binding.
func (r *RBAC) EscalationAllowed(user *corev1.UserInfo) bool {
	return slices.ContainsFunc(user.GetGroups(), func(g string) bool { return slices.Contains(r.superusers, g) })
}

// ConfirmNoEscalation returns nil when the rules user holds in namespace
// (RulesFor) cover rules; otherwise an error naming the rules not held,
// worded as Kubernetes words it:
//
//	user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
//	{APIGroups:["*"], Resources:["*"], Verbs:["*"]}
func (r *RBAC) ConfirmNoEscalation(user *corev1.UserInfo, namespace string, rules []*corev1.PolicyRule) error {
	ok, missing := Covers(r.RulesFor(user, namespace), rules)
	if ok {
		return nil
	}
	var lines []string
	for _, m := range CompactRules(missing) {
		lines = append(lines, CompactString(m))
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	return fmt.Errorf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s",
		user.GetUsername(), user.GetGroups(), strings.Join(lines, "\n"))
}

// A RoleGetter returns the rules of the role a binding in
// bindingNamespace refers to, or an error (shown to the requester) when it
// does not exist.
type RoleGetter func(ref *corev1.RoleRef, bindingNamespace string) ([]*corev1.PolicyRule, error)

// RoleRefRules is the cached RoleGetter: the rules of the role a binding
// in bindingNamespace ("" for a ClusterRoleBinding) refers to, or an error
// when it does not exist (yet): `clusterroles.rbac.authorization.k8s.io
// "x" not found`.
func (r *RBAC) RoleRefRules(ref *corev1.RoleRef, bindingNamespace string) ([]*corev1.PolicyRule, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	switch ref.GetKind() {
	case KindClusterRole:
		if rules, ok := r.clusterRoles[ref.GetName()]; ok {
			return cloneRules(rules), nil
		}
		return nil, fmt.Errorf("clusterroles.%s %q not found", RBACGroup, ref.GetName())
	case KindRole:
		if rules, ok := r.roles[nsName{bindingNamespace, ref.GetName()}]; ok && bindingNamespace != "" {
			return cloneRules(rules), nil
		}
		return nil, fmt.Errorf("roles.%s %q not found", RBACGroup, ref.GetName())
	}
	return nil, fmt.Errorf("unsupported role reference kind: %q", ref.GetKind())
}

// CheckRBACWrite is the escalation check for a write (create, update or
// patch) of a Role, ClusterRole, RoleBinding or ClusterRoleBinding by
// user, after RBAC allowed the write itself; other objects pass (nil).
// old is the stored object an update replaces (nil on create): an update
// that changes only ownerReferences and finalizers (what garbage
// collection changes) is not checked, as in Kubernetes. The refusal is a
// 403 Forbidden:
//
//	clusterrolebindings.rbac.authorization.k8s.io "pwn" is forbidden: user "mallory" (groups=[...]) is attempting to grant RBAC permissions not currently held:
//	{APIGroups:["*"], Resources:["*"], Verbs:["*"]}
//
// roles resolves a binding's roleRef; nil means the cache (RoleRefRules).
// The api stage reads the store instead, so that a binding written just
// after its role does not race the cache.
func (r *RBAC) CheckRBACWrite(user *corev1.UserInfo, obj, old proto.Message, roles RoleGetter) *corev1.Status {
	var (
		resource, ns, name string
		rules              []*corev1.PolicyRule
		ref                *corev1.RoleRef
	)
	switch o := obj.(type) {
	case *corev1.Role:
		resource, ns, name, rules = "roles", o.GetMetadata().GetNamespace(), o.GetMetadata().GetName(), o.GetRules()
	case *corev1.ClusterRole:
		resource, name, rules = "clusterroles", o.GetMetadata().GetName(), o.GetRules()
	case *corev1.RoleBinding:
		resource, ns, name, ref = "rolebindings", o.GetMetadata().GetNamespace(), o.GetMetadata().GetName(), o.GetRoleRef()
	case *corev1.ClusterRoleBinding:
		resource, name, ref = "clusterrolebindings", o.GetMetadata().GetName(), o.GetRoleRef()
	default:
		return nil
	}
	if r.EscalationAllowed(user) || onlyGCFieldsChange(obj, old) {
		return nil
	}
	forbidden := func(err error) *corev1.Status {
		return forbiddenStatus(resource, RBACGroup, name, err.Error())
	}
	if ref == nil { // a role
		if r.Authorize(Attributes{User: user, Verb: VerbEscalate, Namespace: ns, APIGroup: RBACGroup, Resource: resource, Name: name}).Allowed {
			return nil
		}
		if err := r.ConfirmNoEscalation(user, ns, rules); err != nil {
			return forbidden(err)
		}
		return nil
	}
	if r.bindingAuthorized(user, ref, ns) {
		return nil
	}
	if roles == nil {
		roles = r.RoleRefRules
	}
	refRules, err := roles(ref, ns)
	if err != nil {
		return forbidden(err)
	}
	if err := r.ConfirmNoEscalation(user, ns, refRules); err != nil {
		return forbidden(err)
	}
	return nil
}

// bindingAuthorized is Kubernetes' BindingAuthorized: may user `bind` the
// referenced role, asked in the binding's namespace (so a RoleBinding may
// be delegated per namespace).
func (r *RBAC) bindingAuthorized(user *corev1.UserInfo, ref *corev1.RoleRef, bindingNamespace string) bool {
	a := Attributes{User: user, Verb: VerbBind, Namespace: bindingNamespace, APIGroup: ref.GetApiGroup(), Name: ref.GetName()}
	switch ref.GetKind() {
	case KindClusterRole:
		a.Resource = "clusterroles"
	case KindRole:
		a.Resource = "roles"
	default:
		return false
	}
	return r.Authorize(a).Allowed
}

// onlyGCFieldsChange is Kubernetes' IsOnlyMutatingGCFields: obj equals old
// but for ownerReferences and finalizers (and the
// bookkeeping the store sets on every write: resourceVersion, generation).
func onlyGCFieldsChange(obj, old proto.Message) bool {
	o, ok1 := obj.(interface{ GetMetadata() *corev1.ObjectMeta })
	p, ok2 := old.(interface{ GetMetadata() *corev1.ObjectMeta })
	if !ok1 || !ok2 || old == nil || p.GetMetadata() == nil {
		return false
	}
	copied := proto.CloneOf(obj)
	md := copied.(interface{ GetMetadata() *corev1.ObjectMeta }).GetMetadata()
	if md == nil || o.GetMetadata() == nil {
		return false
	}
	pm := p.GetMetadata()
	md.OwnerReferences, md.Finalizers = pm.GetOwnerReferences(), pm.GetFinalizers()
	md.ResourceVersion, md.Generation = pm.GetResourceVersion(), pm.GetGeneration()
	return proto.Equal(copied, old)
}

package auth

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/podflow/podflow/proto/corev1"
)

// RBAC wildcards and subject kinds.
const (
	// All matches every verb, API group, resource or resource name.
	All = "*"

	SubjectUser           = "User"
	SubjectGroup          = "Group"
	SubjectServiceAccount = "ServiceAccount"

	KindRole        = "Role"
	KindClusterRole = "ClusterRole"
)

// Attributes describe one request to authorize, as Kubernetes'
// authorizer.Attributes do for resource requests. Namespace is empty for a
// cluster-scoped request; Name is empty for create, list and watch.
type Attributes struct {
	User        *corev1.UserInfo
	Verb        string
	Namespace   string
	APIGroup    string
	Resource    string
	Subresource string
	Name        string
}

// Decision is the outcome of Authorize. Reason says which binding allowed
// the request ("RBAC: allowed by RoleBinding \"x/y\" of Role \"r\" to User
// \"alice\""); on denial it names the roles bound to the user that do not
// exist ("RBAC: role.rbac.authorization.k8s.io \"r\" not found") and is
// empty otherwise, as in Kubernetes: RBAC denies by having no rule that
// allows.
type Decision struct {
	Allowed bool
	Reason  string
}

// RBACConfig configures an RBAC authorizer.
type RBACConfig struct {
	// SuperuserGroups are allowed every request without consulting RBAC.
	// Default ["system:masters"], as kube-apiserver hard-codes.
	SuperuserGroups []string
}

// DefaultRBACConfig returns the defaults documented on RBACConfig.
func DefaultRBACConfig() RBACConfig {
	return RBACConfig{SuperuserGroups: []string{GroupMasters}}
}

// Validate reports a configuration that cannot work.
func (c RBACConfig) Validate() error {
	for i, g := range c.SuperuserGroups {
		if g == "" {
			return fmt.Errorf("%w: SuperuserGroups[%d] is empty", ErrInvalidConfig, i)
		}
	}
	return nil
}

// subjectKey identifies who a binding applies to. A ServiceAccount subject
// is keyed as the User it authenticates as, so one lookup finds both.
type subjectKey struct{ kind, name string }

// binding is the indexed form of a RoleBinding or ClusterRoleBinding.
type binding struct {
	kind      string // "RoleBinding" or "ClusterRoleBinding"
	namespace string // "" for a ClusterRoleBinding
	name      string
	roleRef   *corev1.RoleRef
	subjects  []subjectKey
}

type nsName struct{ namespace, name string }

// RBAC is an in-memory cache of Roles, ClusterRoles, RoleBindings and
// ClusterRoleBindings that authorizes requests the way Kubernetes' RBAC
// authorizer does. Bindings are indexed by namespace and subject, so
// Authorize looks only at bindings naming the user or one of its groups.
// Objects are copied on Upsert. It is safe for concurrent use; Upsert and
// Delete are meant to be fed by a store watch, in any order (a binding may
// arrive before its role: it grants nothing until the role does).
type RBAC struct {
	superusers []string

	mu           sync.RWMutex
	roles        map[nsName][]*corev1.PolicyRule
	clusterRoles map[string][]*corev1.PolicyRule
	bindings     map[nsName]*binding                           // namespace "" = ClusterRoleBinding
	bySubject    map[string]map[subjectKey]map[nsName]*binding // namespace -> subject -> bindings
}

// NewRBAC returns an empty authorizer: it allows only superusers until
// policy is upserted (see BootstrapPolicy).
func NewRBAC(cfg RBACConfig) (*RBAC, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &RBAC{
		superusers:   slices.Clone(cfg.SuperuserGroups),
		roles:        make(map[nsName][]*corev1.PolicyRule),
		clusterRoles: make(map[string][]*corev1.PolicyRule),
		bindings:     make(map[nsName]*binding),
		bySubject:    make(map[string]map[subjectKey]map[nsName]*binding),
	}, nil
}

// UpsertRole records or replaces a Role.
func (r *RBAC) UpsertRole(role *corev1.Role) {
	rules := cloneRules(role.GetRules())
	r.mu.Lock()
	r.roles[nsName{role.GetMetadata().GetNamespace(), role.GetMetadata().GetName()}] = rules
	r.mu.Unlock()
}

// DeleteRole forgets a Role.
func (r *RBAC) DeleteRole(namespace, name string) {
	r.mu.Lock()
	delete(r.roles, nsName{namespace, name})
	r.mu.Unlock()
}

// UpsertClusterRole records or replaces a ClusterRole.
func (r *RBAC) UpsertClusterRole(role *corev1.ClusterRole) {
	rules := cloneRules(role.GetRules())
	r.mu.Lock()
	r.clusterRoles[role.GetMetadata().GetName()] = rules
	r.mu.Unlock()
}

// DeleteClusterRole forgets a ClusterRole.
func (r *RBAC) DeleteClusterRole(name string) {
	r.mu.Lock()
	delete(r.clusterRoles, name)
	r.mu.Unlock()
}

// UpsertRoleBinding records or replaces a RoleBinding. ServiceAccount
// subjects without a namespace default to the binding's namespace. A
// RoleBinding without a namespace is invalid and ignored (it must not act
// as a ClusterRoleBinding).
func (r *RBAC) UpsertRoleBinding(rb *corev1.RoleBinding) {
	ns := rb.GetMetadata().GetNamespace()
	if ns == "" {
		return
	}
	r.upsertBinding(newBinding("RoleBinding", ns, rb.GetMetadata().GetName(), rb.GetRoleRef(), rb.GetSubjects()))
}

// DeleteRoleBinding forgets a RoleBinding.
func (r *RBAC) DeleteRoleBinding(namespace, name string) {
	if namespace == "" {
		return // would name a ClusterRoleBinding
	}
	r.deleteBinding(nsName{namespace, name})
}

// UpsertClusterRoleBinding records or replaces a ClusterRoleBinding.
func (r *RBAC) UpsertClusterRoleBinding(crb *corev1.ClusterRoleBinding) {
	r.upsertBinding(newBinding("ClusterRoleBinding", "", crb.GetMetadata().GetName(), crb.GetRoleRef(), crb.GetSubjects()))
}

// DeleteClusterRoleBinding forgets a ClusterRoleBinding.
func (r *RBAC) DeleteClusterRoleBinding(name string) {
	r.deleteBinding(nsName{"", name})
}

// Upsert dispatches on the object's type to the typed Upsert methods, for a
// store watch that sees RBAC objects as proto messages.
func (r *RBAC) Upsert(obj proto.Message) error {
	switch o := obj.(type) {
	case *corev1.Role:
		r.UpsertRole(o)
	case *corev1.ClusterRole:
		r.UpsertClusterRole(o)
	case *corev1.RoleBinding:
		r.UpsertRoleBinding(o)
	case *corev1.ClusterRoleBinding:
		r.UpsertClusterRoleBinding(o)
	default:
		return fmt.Errorf("%w: %T", ErrUnsupportedObject, obj)
	}
	return nil
}

// Delete dispatches on the object's type to the typed Delete methods; only
// the object's metadata is used.
func (r *RBAC) Delete(obj proto.Message) error {
	switch o := obj.(type) {
	case *corev1.Role:
		r.DeleteRole(o.GetMetadata().GetNamespace(), o.GetMetadata().GetName())
	case *corev1.ClusterRole:
		r.DeleteClusterRole(o.GetMetadata().GetName())
	case *corev1.RoleBinding:
		r.DeleteRoleBinding(o.GetMetadata().GetNamespace(), o.GetMetadata().GetName())
	case *corev1.ClusterRoleBinding:
		r.DeleteClusterRoleBinding(o.GetMetadata().GetName())
	default:
		return fmt.Errorf("%w: %T", ErrUnsupportedObject, obj)
	}
	return nil
}

func newBinding(kind, ns, name string, ref *corev1.RoleRef, subjects []*corev1.Subject) *binding {
	b := &binding{kind: kind, namespace: ns, name: name, roleRef: proto.CloneOf(ref)}
	for _, s := range subjects {
		if s.GetName() == "" {
			continue // names no one; must not match an empty username
		}
		switch s.GetKind() {
		case SubjectUser:
			b.subjects = append(b.subjects, subjectKey{SubjectUser, s.GetName()})
		case SubjectGroup:
			b.subjects = append(b.subjects, subjectKey{SubjectGroup, s.GetName()})
		case SubjectServiceAccount:
			saNS := s.GetNamespace()
			if saNS == "" {
				saNS = ns
			}
			if saNS == "" {
				continue // a ServiceAccount subject must be namespaced
			}
			b.subjects = append(b.subjects, subjectKey{SubjectUser, ServiceAccountUsername(saNS, s.GetName())})
		}
	}
	return b
}

func (r *RBAC) upsertBinding(b *binding) {
	key := nsName{b.namespace, b.name}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unindexLocked(key)
	r.bindings[key] = b
	bySub := r.bySubject[b.namespace]
	if bySub == nil {
		bySub = make(map[subjectKey]map[nsName]*binding)
		r.bySubject[b.namespace] = bySub
	}
	for _, s := range b.subjects {
		set := bySub[s]
		if set == nil {
			set = make(map[nsName]*binding)
			bySub[s] = set
		}
		set[key] = b
	}
}

func (r *RBAC) deleteBinding(key nsName) {
	r.mu.Lock()
	r.unindexLocked(key)
	r.mu.Unlock()
}

func (r *RBAC) unindexLocked(key nsName) {
	old, ok := r.bindings[key]
	if !ok {
		return
	}
	delete(r.bindings, key)
	bySub := r.bySubject[key.namespace]
	for _, s := range old.subjects {
		delete(bySub[s], key)
		if len(bySub[s]) == 0 {
			delete(bySub, s)
		}
	}
	if len(bySub) == 0 {
		delete(r.bySubject, key.namespace)
	}
}

// Authorize decides a request. Superuser groups are allowed everything;
// otherwise the request is allowed when a rule of a role bound to the user,
// one of its groups or (for a ServiceAccount user) its ServiceAccount
// allows it: ClusterRoleBindings for any request, RoleBindings of the
// request's namespace for namespaced requests.
func (r *RBAC) Authorize(a Attributes) Decision { return r.authorize(a, true) }

// authorize is Authorize; an allowing Decision holds its Reason only when
// reason is set (Check does not read it, and the reason's formatting
// was most of a check's cost).
func (r *RBAC) authorize(a Attributes, reason bool) Decision {
	if a.User == nil {
		return Decision{}
	}
	for _, g := range a.User.GetGroups() {
		if slices.Contains(r.superusers, g) {
			d := Decision{Allowed: true}
			if reason {
				d.Reason = fmt.Sprintf("superuser group %q", g)
			}
			return d
		}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	scopes := [2]string{"", a.Namespace}
	var missing []error // roles bound to the user that do not exist
	for i, ns := range scopes {
		if i == 1 && ns == "" {
			break // a cluster-scoped request: RoleBindings do not apply
		}
		bySub := r.bySubject[ns]
		if bySub == nil {
			continue
		}
		if d, ok := r.authorizeSubject(bySub, subjectKey{SubjectUser, a.User.GetUsername()}, a, reason, &missing); ok {
			return d
		}
		for _, g := range a.User.GetGroups() {
			if d, ok := r.authorizeSubject(bySub, subjectKey{SubjectGroup, g}, a, reason, &missing); ok {
				return d
			}
		}
	}
	if len(missing) > 0 {
		// As Kubernetes' RBAC authorizer: a denial names the bound roles
		// it could not find.
		slices.SortFunc(missing, func(x, y error) int { return strings.Compare(x.Error(), y.Error()) })
		return Decision{Reason: fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(missing))}
	}
	return Decision{}
}

func (r *RBAC) authorizeSubject(bySub map[subjectKey]map[nsName]*binding, k subjectKey, a Attributes, reason bool, missing *[]error) (Decision, bool) {
	for _, b := range bySub[k] {
		if r.bindingAllows(b, a) {
			d := Decision{Allowed: true}
			if reason {
				d.Reason = allowReason(b, k)
			}
			return d, true
		}
		if err := r.roleMissing(b); err != nil {
			*missing = append(*missing, err)
		}
	}
	return Decision{}, false
}

// roleMissing is Kubernetes' not-found error for the role b refers to
// when it does not exist, nil otherwise.
func (r *RBAC) roleMissing(b *binding) error {
	switch ref := b.roleRef; {
	case ref.GetKind() == KindClusterRole:
		if _, ok := r.clusterRoles[ref.GetName()]; !ok {
			return fmt.Errorf("clusterrole.rbac.authorization.k8s.io %q not found", ref.GetName())
		}
	case ref.GetKind() == KindRole && b.namespace != "":
		if _, ok := r.roles[nsName{b.namespace, ref.GetName()}]; !ok {
			return fmt.Errorf("role.rbac.authorization.k8s.io %q not found", ref.GetName())
		}
	}
	return nil
}

// RulesFor lists the rules that apply to user in namespace, as
// Kubernetes' RBAC RulesFor does for a SelfSubjectRulesReview (`kubectl
// auth can-i --list`): the rules of every role bound to the user, one of
// its groups or its ServiceAccount by a ClusterRoleBinding, or by a
// RoleBinding of namespace. Superusers get one rule allowing everything.
// The rules are copies, ordered by binding so the answer is stable.
func (r *RBAC) RulesFor(user *corev1.UserInfo, namespace string) []*corev1.PolicyRule {
	if user == nil {
		return nil
	}
	for _, g := range user.GetGroups() {
		if slices.Contains(r.superusers, g) {
			return []*corev1.PolicyRule{{Verbs: []string{All}, ApiGroups: []string{All}, Resources: []string{All}}}
		}
	}
	keys := []subjectKey{{SubjectUser, user.GetUsername()}}
	for _, g := range user.GetGroups() {
		keys = append(keys, subjectKey{SubjectGroup, g})
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var bs []*binding
	seen := map[*binding]bool{}
	scopes := []string{""} // ClusterRoleBindings apply everywhere
	if namespace != "" {
		scopes = append(scopes, namespace)
	}
	for _, ns := range scopes {
		for _, k := range keys {
			for _, b := range r.bySubject[ns][k] {
				if !seen[b] {
					seen[b] = true
					bs = append(bs, b)
				}
			}
		}
	}
	slices.SortFunc(bs, func(a, b *binding) int {
		if a.namespace != b.namespace {
			return strings.Compare(a.namespace, b.namespace)
		}
		return strings.Compare(a.name, b.name)
	})
	var out []*corev1.PolicyRule
	for _, b := range bs {
		for _, rule := range r.rulesOf(b) {
			out = append(out, proto.CloneOf(rule))
		}
	}
	return out
}

// Check is Authorize as a Status: nil when allowed, Forbidden otherwise.
func (r *RBAC) Check(a Attributes) *corev1.Status {
	if r.authorize(a, false).Allowed {
		return nil
	}
	return Forbidden(a, "")
}

// rulesOf returns the rules of b's role (nil until the role exists).
func (r *RBAC) rulesOf(b *binding) []*corev1.PolicyRule {
	switch ref := b.roleRef; {
	case ref.GetKind() == KindClusterRole:
		return r.clusterRoles[ref.GetName()]
	case ref.GetKind() == KindRole && b.namespace != "":
		return r.roles[nsName{b.namespace, ref.GetName()}]
	}
	return nil
}

func (r *RBAC) bindingAllows(b *binding, a Attributes) bool {
	for _, rule := range r.rulesOf(b) {
		if RuleAllows(rule, a) {
			return true
		}
	}
	return false
}

func allowReason(b *binding, k subjectKey) string {
	name := b.name
	if b.namespace != "" {
		name = b.namespace + "/" + b.name
	}
	return fmt.Sprintf("RBAC: allowed by %s %q of %s %q to %s %q",
		b.kind, name, b.roleRef.GetKind(), b.roleRef.GetName(), k.kind, k.name)
}

// RuleAllows reports whether one policy rule allows a resource request,
// with Kubernetes' matching: "*" matches any verb, group, resource or
// subresource; "pods/log" names a subresource and "*/log" that subresource
// of any resource; resourceNames, when set, must contain the request's name.
func RuleAllows(rule *corev1.PolicyRule, a Attributes) bool {
	return matches(rule.GetVerbs(), a.Verb) &&
		matches(rule.GetApiGroups(), a.APIGroup) &&
		resourceMatches(rule.GetResources(), a.Resource, a.Subresource) &&
		resourceNameMatches(rule.GetResourceNames(), a.Name)
}

func matches(list []string, v string) bool {
	for _, s := range list {
		if s == All || s == v {
			return true
		}
	}
	return false
}

func resourceMatches(list []string, resource, sub string) bool {
	for _, s := range list {
		if s == All || sub == "" && s == resource {
			return true
		}
		// resource/sub or */sub, compared without building either.
		if sub != "" && strings.HasSuffix(s, sub) {
			if head, ok := strings.CutSuffix(s[:len(s)-len(sub)], "/"); ok && (head == resource || head == All) {
				return true
			}
		}
	}
	return false
}

func resourceNameMatches(list []string, name string) bool {
	if len(list) == 0 {
		return true
	}
	return name != "" && slices.Contains(list, name)
}

func cloneRules(rules []*corev1.PolicyRule) []*corev1.PolicyRule {
	out := make([]*corev1.PolicyRule, len(rules))
	for i, r := range rules {
		out[i] = proto.CloneOf(r)
	}
	return out
}

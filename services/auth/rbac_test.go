package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

func meta(ns, name string) *corev1.ObjectMeta { return &corev1.ObjectMeta{Namespace: ns, Name: name} }

func rule(verbs, groups, resources, names []string) *corev1.PolicyRule {
	return &corev1.PolicyRule{Verbs: verbs, ApiGroups: groups, Resources: resources, ResourceNames: names}
}

func s(v ...string) []string { return v }

func user(name string, groups ...string) *corev1.UserInfo {
	return &corev1.UserInfo{Username: name, Groups: append(groups, GroupAuthenticated)}
}

// policy is a small cluster: Alice edits pods in "default", the ops group
// reads logs everywhere, the builder ServiceAccount creates pods in "ci",
// carol may get one named pod, dave's RoleBinding points at a missing Role.
func policy(t *testing.T) *RBAC {
	t.Helper()
	r, err := NewRBAC(DefaultRBACConfig())
	if err != nil {
		t.Fatal(err)
	}
	crs, crbs := BootstrapPolicy()
	for _, cr := range crs {
		r.UpsertClusterRole(cr)
	}
	for _, crb := range crbs {
		r.UpsertClusterRoleBinding(crb)
	}
	r.UpsertRole(&corev1.Role{Metadata: meta("default", "pod-editor"), Rules: []*corev1.PolicyRule{
		rule(s("create", "get", "list", "delete"), s(""), s("pods"), nil),
	}})
	r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta("default", "alice-edits"),
		Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "alice"}},
		RoleRef:  &corev1.RoleRef{Kind: KindRole, Name: "pod-editor"}})
	r.UpsertClusterRole(&corev1.ClusterRole{Metadata: meta("", "log-reader"), Rules: []*corev1.PolicyRule{
		rule(s("get"), s(""), s("*/log"), nil),
	}})
	r.UpsertClusterRoleBinding(&corev1.ClusterRoleBinding{Metadata: meta("", "ops-logs"),
		Subjects: []*corev1.Subject{{Kind: SubjectGroup, Name: "ops"}},
		RoleRef:  &corev1.RoleRef{Kind: KindClusterRole, Name: "log-reader"}})
	r.UpsertClusterRole(&corev1.ClusterRole{Metadata: meta("", "pod-creator"), Rules: []*corev1.PolicyRule{
		rule(s("create"), s(""), s("pods"), nil),
	}})
	// A RoleBinding to a ClusterRole grants it in the binding's namespace
	// only; the ServiceAccount subject's namespace defaults to the binding's.
	r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta("ci", "builder-creates"),
		Subjects: []*corev1.Subject{{Kind: SubjectServiceAccount, Name: "builder"}},
		RoleRef:  &corev1.RoleRef{Kind: KindClusterRole, Name: "pod-creator"}})
	r.UpsertRole(&corev1.Role{Metadata: meta("default", "one-pod"), Rules: []*corev1.PolicyRule{
		rule(s("get"), s(""), s("pods", "pods/status"), s("web-0")),
	}})
	r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta("default", "carol-one-pod"),
		Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "carol"}},
		RoleRef:  &corev1.RoleRef{Kind: KindRole, Name: "one-pod"}})
	r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta("default", "dave-missing"),
		Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "dave"}},
		RoleRef:  &corev1.RoleRef{Kind: KindRole, Name: "does-not-exist"}})
	r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta("default", "erin-view"),
		Subjects: []*corev1.Subject{{Kind: SubjectGroup, Name: "viewers"}},
		RoleRef:  &corev1.RoleRef{Kind: KindClusterRole, Name: ClusterRoleView}})
	r.UpsertRole(&corev1.Role{Metadata: meta("apps", "deployer"), Rules: []*corev1.PolicyRule{
		rule(s("*"), s("apps"), s("deployments"), nil),
	}})
	r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta("apps", "deployer"),
		Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "frank"}},
		RoleRef:  &corev1.RoleRef{Kind: KindRole, Name: "deployer"}})
	return r
}

func TestAuthorize(t *testing.T) {
	r := policy(t)
	builder := &corev1.UserInfo{Username: "system:serviceaccount:ci:builder",
		Groups: []string{GroupServiceAccounts, "system:serviceaccounts:ci", GroupAuthenticated}}
	pods := func(u *corev1.UserInfo, verb, ns string) Attributes {
		return Attributes{User: u, Verb: verb, Namespace: ns, Resource: "pods"}
	}
	tests := []struct {
		name  string
		given Attributes
		want  bool
	}{
		{"role allows", pods(user("alice"), "create", "default"), true},
		{"role verb not listed", pods(user("alice"), "update", "default"), false},
		{"role binding is namespaced", pods(user("alice"), "create", "other"), false},
		{"role does not cover subresource", Attributes{User: user("alice"), Verb: "get", Namespace: "default", Resource: "pods", Subresource: "log", Name: "x"}, false},
		{"cluster-scoped request ignores role bindings", pods(user("alice"), "list", ""), false},
		{"unknown user", pods(user("mallory"), "create", "default"), false},
		{"nil user", pods(nil, "create", "default"), false},
		{"system:masters is superuser", pods(user("root", GroupMasters), "delete", "kube-system"), true},
		{"group via cluster role binding, */log", Attributes{User: user("olga", "ops"), Verb: "get", Namespace: "any", Resource: "pods", Subresource: "log", Name: "p"}, true},
		{"*/log does not match the resource itself", Attributes{User: user("olga", "ops"), Verb: "get", Namespace: "any", Resource: "pods", Name: "p"}, false},
		{"*/log does not match another subresource", Attributes{User: user("olga", "ops"), Verb: "get", Namespace: "any", Resource: "pods", Subresource: "status", Name: "p"}, false},
		{"service account via defaulted namespace", pods(builder, "create", "ci"), true},
		{"service account elsewhere", pods(builder, "create", "default"), false},
		{"user named like the SA's name is not the SA", pods(user("builder"), "create", "ci"), false},
		{"resourceNames match", Attributes{User: user("carol"), Verb: "get", Namespace: "default", Resource: "pods", Name: "web-0"}, true},
		{"resourceNames subresource", Attributes{User: user("carol"), Verb: "get", Namespace: "default", Resource: "pods", Subresource: "status", Name: "web-0"}, true},
		{"resourceNames other name", Attributes{User: user("carol"), Verb: "get", Namespace: "default", Resource: "pods", Name: "web-1"}, false},
		{"resourceNames need a name", Attributes{User: user("carol"), Verb: "get", Namespace: "default", Resource: "pods"}, false},
		{"binding to missing role grants nothing", pods(user("dave"), "get", "default"), false},
		{"view cluster role via role binding", pods(user("erin", "viewers"), "list", "default"), true},
		{"view cannot write", pods(user("erin", "viewers"), "create", "default"), false},
		{"view cannot read secrets", Attributes{User: user("erin", "viewers"), Verb: "get", Namespace: "default", Resource: "secrets", Name: "s"}, false},
		{"verb wildcard in API group", Attributes{User: user("frank"), Verb: "patch", Namespace: "apps", APIGroup: "apps", Resource: "deployments", Name: "d"}, true},
		{"API group must match", Attributes{User: user("frank"), Verb: "patch", Namespace: "apps", APIGroup: "", Resource: "deployments", Name: "d"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := r.Authorize(tc.given)
			if d.Allowed != tc.want {
				t.Fatalf("Authorize = %+v, want allowed=%v", d, tc.want)
			}
			if d.Allowed && d.Reason == "" {
				t.Fatal("allowed without a reason")
			}
			if st := r.Check(tc.given); (st == nil) != tc.want {
				t.Fatalf("Check = %v, want allowed=%v", st, tc.want)
			}
		})
	}
}

func TestAuthorizeReason(t *testing.T) {
	r := policy(t)
	d := r.Authorize(Attributes{User: user("alice"), Verb: "create", Namespace: "default", Resource: "pods"})
	want := `RBAC: allowed by RoleBinding "default/alice-edits" of Role "pod-editor" to User "alice"`
	if d.Reason != want {
		t.Fatalf("reason = %q, want %q", d.Reason, want)
	}
}

// TestCheckAllocatesNothing: Check, asked for every request a stage
// authorizes, decides an allowed request without formatting the reason
// Authorize gives (Check does not return it).
func TestCheckAllocatesNothing(t *testing.T) {
	r := policy(t)
	for _, a := range []Attributes{
		{User: user("alice"), Verb: "create", Namespace: "default", Resource: "pods"},
		{User: user("olga", "ops"), Verb: "get", Namespace: "any", Resource: "pods", Subresource: "log", Name: "p"},
		{User: user("root", GroupMasters), Verb: "delete", Namespace: "kube-system", Resource: "pods"},
	} {
		if n := testing.AllocsPerRun(100, func() {
			if st := r.Check(a); st != nil {
				t.Fatalf("Check(%+v) = %v, want allowed", a, st)
			}
		}); n != 0 {
			t.Errorf("Check(%+v): %.0f allocations, want none", a, n)
		}
	}
}

// TestDenialReasonNamesMissingRoles: a denial names the roles bound to the
// user that do not exist, as Kubernetes' RBAC authorizer's reason; other
// denials have none.
func TestDenialReasonNamesMissingRoles(t *testing.T) {
	r := policy(t)
	d := r.Authorize(Attributes{User: user("dave"), Verb: "get", Namespace: "default", Resource: "pods"})
	if want := `RBAC: role.rbac.authorization.k8s.io "does-not-exist" not found`; d.Allowed || d.Reason != want {
		t.Errorf("dave: %+v, want denied with %q", d, want)
	}
	r.UpsertClusterRoleBinding(&corev1.ClusterRoleBinding{Metadata: meta("", "dave-gone"),
		Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "dave"}},
		RoleRef:  &corev1.RoleRef{Kind: KindClusterRole, Name: "gone"}})
	d = r.Authorize(Attributes{User: user("dave"), Verb: "get", Namespace: "default", Resource: "pods"})
	if want := `RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, role.rbac.authorization.k8s.io "does-not-exist" not found]`; d.Reason != want {
		t.Errorf("dave with two missing roles: %q, want %q", d.Reason, want)
	}
	if d := r.Authorize(Attributes{User: user("nobody"), Verb: "get", Namespace: "default", Resource: "pods"}); d.Allowed || d.Reason != "" {
		t.Errorf("nobody: %+v, want denied without a reason", d)
	}
}

func TestUpsertDeleteReindex(t *testing.T) {
	r := policy(t)
	a := Attributes{User: user("alice"), Verb: "create", Namespace: "default", Resource: "pods"}
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{"initially allowed", func() {}, true},
		{"binding's subjects replaced", func() {
			r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta("default", "alice-edits"),
				Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "bob"}},
				RoleRef:  &corev1.RoleRef{Kind: KindRole, Name: "pod-editor"}})
		}, false},
		{"binding restored", func() {
			r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta("default", "alice-edits"),
				Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "alice"}},
				RoleRef:  &corev1.RoleRef{Kind: KindRole, Name: "pod-editor"}})
		}, true},
		{"role rules narrowed", func() {
			r.UpsertRole(&corev1.Role{Metadata: meta("default", "pod-editor"), Rules: []*corev1.PolicyRule{
				rule(s("get"), s(""), s("pods"), nil)}})
		}, false},
		{"role deleted then recreated", func() {
			r.DeleteRole("default", "pod-editor")
			r.UpsertRole(&corev1.Role{Metadata: meta("default", "pod-editor"), Rules: []*corev1.PolicyRule{
				rule(s("*"), s("*"), s("*"), nil)}})
		}, true},
		{"binding deleted via Delete", func() {
			if err := r.Delete(&corev1.RoleBinding{Metadata: meta("default", "alice-edits")}); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"cluster role binding added via Upsert", func() {
			if err := r.Upsert(&corev1.ClusterRoleBinding{Metadata: meta("", "alice-admin"),
				Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "alice"}},
				RoleRef:  &corev1.RoleRef{Kind: KindClusterRole, Name: ClusterRoleClusterAdmin}}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"cluster role deleted", func() { r.DeleteClusterRole(ClusterRoleClusterAdmin) }, false},
		{"cluster role binding deleted", func() {
			r.UpsertClusterRole(&corev1.ClusterRole{Metadata: meta("", ClusterRoleClusterAdmin),
				Rules: []*corev1.PolicyRule{rule(s("*"), s("*"), s("*"), nil)}})
			r.DeleteClusterRoleBinding("alice-admin")
		}, false},
		{"RoleBinding without a namespace is ignored", func() {
			r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta("", "no-namespace"),
				Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "alice"}},
				RoleRef:  &corev1.RoleRef{Kind: KindClusterRole, Name: ClusterRoleClusterAdmin}})
		}, false},
		{"subject without a name matches no one", func() {
			r.UpsertClusterRoleBinding(&corev1.ClusterRoleBinding{Metadata: meta("", "nameless"),
				Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: ""}},
				RoleRef:  &corev1.RoleRef{Kind: KindClusterRole, Name: ClusterRoleClusterAdmin}})
			if r.Authorize(Attributes{User: &corev1.UserInfo{}, Verb: "get", Namespace: "default", Resource: "pods", Name: "p"}).Allowed {
				t.Fatal("empty username allowed by a nameless subject")
			}
		}, false},
		{"Role kind in a ClusterRoleBinding grants nothing", func() {
			r.UpsertRole(&corev1.Role{Metadata: meta("", "pod-editor"), Rules: []*corev1.PolicyRule{rule(s("*"), s("*"), s("*"), nil)}})
			r.UpsertClusterRoleBinding(&corev1.ClusterRoleBinding{Metadata: meta("", "bogus"),
				Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "alice"}},
				RoleRef:  &corev1.RoleRef{Kind: KindRole, Name: "pod-editor"}})
		}, false},
	}
	for _, st := range steps {
		st.do()
		if got := r.Authorize(a).Allowed; got != st.want {
			t.Fatalf("after %q: allowed = %v, want %v", st.name, got, st.want)
		}
	}
	if err := r.Upsert(&corev1.Pod{}); !errors.Is(err, ErrUnsupportedObject) {
		t.Fatalf("Upsert(Pod) err = %v, want ErrUnsupportedObject", err)
	}
	if err := r.Delete(&corev1.Pod{}); !errors.Is(err, ErrUnsupportedObject) {
		t.Fatalf("Delete(Pod) err = %v, want ErrUnsupportedObject", err)
	}
	// The index holds nothing for deleted bindings.
	r.mu.RLock()
	defer r.mu.RUnlock()
	if _, ok := r.bySubject["default"][subjectKey{SubjectUser, "alice"}]; ok {
		t.Fatal("index still holds alice in default after her binding was deleted")
	}
}

func TestUpsertCopies(t *testing.T) {
	r, _ := NewRBAC(DefaultRBACConfig())
	role := &corev1.ClusterRole{Metadata: meta("", "r"), Rules: []*corev1.PolicyRule{rule(s("get"), s(""), s("pods"), nil)}}
	r.UpsertClusterRole(role)
	r.UpsertClusterRoleBinding(&corev1.ClusterRoleBinding{Metadata: meta("", "b"),
		Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "u"}}, RoleRef: &corev1.RoleRef{Kind: KindClusterRole, Name: "r"}})
	role.Rules[0].Verbs[0] = "*"
	if r.Authorize(Attributes{User: user("u"), Verb: "delete", Resource: "pods", Namespace: "x"}).Allowed {
		t.Fatal("caller's change to an upserted role leaked into the cache")
	}
}

func TestForbiddenMessage(t *testing.T) {
	tests := []struct {
		name  string
		given Attributes
		want  string
	}{
		{"namespaced create", Attributes{User: user("alice"), Verb: "create", Namespace: "default", Resource: "pods"},
			`pods is forbidden: User "alice" cannot create resource "pods" in API group "" in the namespace "default"`},
		{"named subresource", Attributes{User: user("alice"), Verb: "get", Namespace: "default", Resource: "pods", Subresource: "log", Name: "web"},
			`pods "web" is forbidden: User "alice" cannot get resource "pods/log" in API group "" in the namespace "default"`},
		{"cluster scope with group", Attributes{User: user("bob"), Verb: "list", APIGroup: "rbac.authorization.k8s.io", Resource: "clusterroles"},
			`clusterroles.rbac.authorization.k8s.io is forbidden: User "bob" cannot list resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := Forbidden(tc.given, "")
			if st.Message != tc.want {
				t.Fatalf("message\n got %s\nwant %s", st.Message, tc.want)
			}
			if st.Code != 403 || st.Reason != eventsv1.ReasonForbidden || st.Status != "Failure" {
				t.Fatalf("status = %v", st)
			}
		})
	}
	if got := Forbidden(tests[0].given, "no rule").Message; !strings.HasSuffix(got, `"default": no rule`) {
		t.Fatalf("reason not appended: %s", got)
	}
}

func TestBootstrapPolicy(t *testing.T) {
	crs, crbs := BootstrapPolicy()
	names := map[string]bool{}
	for _, cr := range crs {
		names[cr.GetMetadata().GetName()] = true
	}
	for _, n := range []string{ClusterRoleClusterAdmin, ClusterRoleAdmin, ClusterRoleEdit, ClusterRoleView} {
		if !names[n] {
			t.Errorf("missing ClusterRole %q", n)
		}
	}
	// With no superuser shortcut, system:masters is still allowed by the
	// cluster-admin binding.
	r, err := NewRBAC(RBACConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cr := range crs {
		r.UpsertClusterRole(cr)
	}
	for _, crb := range crbs {
		r.UpsertClusterRoleBinding(crb)
	}
	d := r.Authorize(Attributes{User: user("root", GroupMasters), Verb: "escalate", APIGroup: "rbac.authorization.k8s.io", Resource: "clusterroles"})
	if !d.Allowed || !strings.Contains(d.Reason, `ClusterRoleBinding "cluster-admin"`) {
		t.Fatalf("system:masters via bootstrap = %+v", d)
	}
	if r.Authorize(Attributes{User: user("nobody"), Verb: "get", Namespace: "default", Resource: "pods", Name: "p"}).Allowed {
		t.Fatal("bootstrap policy grants an unbound user")
	}
}

func TestRBACConfigValidate(t *testing.T) {
	if _, err := NewRBAC(RBACConfig{SuperuserGroups: []string{""}}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
}

// TestConcurrentUse runs Authorize against concurrent Upsert/Delete; it
// is meant for -race.
func TestConcurrentUse(t *testing.T) {
	r := policy(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := Attributes{User: user("alice", "ops"), Verb: "create", Namespace: "default", Resource: "pods"}
			for {
				select {
				case <-stop:
					return
				default:
					r.Authorize(a)
				}
			}
		}()
	}
	for i := 0; i < 500; i++ {
		name := fmt.Sprintf("b%d", i%7)
		r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta("default", name),
			Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "alice"}, {Kind: SubjectGroup, Name: "ops"}},
			RoleRef:  &corev1.RoleRef{Kind: KindRole, Name: "pod-editor"}})
		if i%3 == 0 {
			r.DeleteRoleBinding("default", name)
		}
	}
	close(stop)
	wg.Wait()
}

func BenchmarkAuthorize(b *testing.B) {
	r, _ := NewRBAC(DefaultRBACConfig())
	crs, crbs := BootstrapPolicy()
	for _, cr := range crs {
		r.UpsertClusterRole(cr)
	}
	for _, crb := range crbs {
		r.UpsertClusterRoleBinding(crb)
	}
	// 1000 namespaces with 10 bindings each, one of them for the user.
	for n := 0; n < 1000; n++ {
		ns := fmt.Sprintf("ns-%d", n)
		for i := 0; i < 10; i++ {
			r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta(ns, fmt.Sprintf("b%d", i)),
				Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: fmt.Sprintf("user-%d", i)}},
				RoleRef:  &corev1.RoleRef{Kind: KindClusterRole, Name: ClusterRoleEdit}})
		}
	}
	a := Attributes{User: user("user-9", "team-a", "team-b"), Verb: "create", Namespace: "ns-500", Resource: "pods"}
	b.ReportAllocs()
	for b.Loop() {
		if !r.Authorize(a).Allowed {
			b.Fatal("denied")
		}
	}
}

// TestRulesFor: the rules listed for a user in a namespace (kubectl auth
// can-i --list) allow exactly what Authorize allows there.
func TestRulesFor(t *testing.T) {
	r := policy(t)
	users := []*corev1.UserInfo{
		user("alice"), user("bob", "ops"), user(ServiceAccountUsername("ci", "builder"), "system:serviceaccounts"),
		user("carol"), user("dave"), user("root", GroupMasters), user("nobody"),
	}
	for _, u := range users {
		for _, ns := range []string{"default", "ci", ""} {
			rules := r.RulesFor(u, ns)
			for _, verb := range s("get", "list", "create", "delete", "watch") {
				for _, res := range [][2]string{{"pods", ""}, {"pods", "log"}, {"secrets", ""}, {"selfsubjectaccessreviews", ""}} {
					for _, name := range s("", "web", "db") {
						group := ""
						if res[0] == "selfsubjectaccessreviews" {
							group = "authorization.k8s.io"
						}
						a := Attributes{User: u, Verb: verb, Namespace: ns, APIGroup: group, Resource: res[0], Subresource: res[1], Name: name}
						listed := false
						for _, rule := range rules {
							listed = listed || RuleAllows(rule, a)
						}
						if want := r.Authorize(a).Allowed; listed != want {
							t.Errorf("%s in %q: %s %s/%s %q: the listed rules allow it: %v, Authorize: %v",
								u.GetUsername(), ns, verb, res[0], res[1], name, listed, want)
						}
					}
				}
			}
		}
	}
	if got := r.RulesFor(user("alice"), "default"); len(got) != 1 || !slices.Equal(got[0].GetVerbs(), s("create", "get", "list", "delete")) {
		t.Errorf("alice's rules in default: %v, want pod-editor's", got)
	}
	if got := r.RulesFor(user("alice"), "ci"); len(got) != 0 {
		t.Errorf("alice's rules in ci: %v, want none", got)
	}
	if got := r.RulesFor(nil, "default"); got != nil {
		t.Errorf("rules of no user: %v", got)
	}
}

// TestDeploymentControllerRole: kube's
// system:controller:deployment-controller lets the deployment
// controller's ServiceAccount manage ReplicaSets and its Deployments'
// status, and nothing it does not need: no pod creation or deletion, no
// Secrets, no other workload's status.
func TestDeploymentControllerRole(t *testing.T) {
	r, err := NewRBAC(RBACConfig{})
	if err != nil {
		t.Fatal(err)
	}
	crs, crbs := BootstrapPolicy()
	for _, cr := range crs {
		r.UpsertClusterRole(cr)
	}
	for _, crb := range crbs {
		r.UpsertClusterRoleBinding(crb)
	}
	sa := user("system:serviceaccount:kube-system:deployment-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system")
	for _, c := range []struct {
		verb, group, resource, sub string
		want                       bool
	}{
		{"update", "apps", "deployments", "", true},
		{"update", "apps", "deployments", "status", true},
		{"create", "apps", "replicasets", "", true},
		{"delete", "apps", "replicasets", "", true},
		{"patch", "apps", "replicasets", "", true},
		{"list", "", "pods", "", true},
		{"create", "", "pods", "", false},
		{"delete", "", "pods", "", false},
		{"get", "", "secrets", "", false},
		{"update", "apps", "replicasets", "status", false},
		{"create", "apps", "deployments", "", false},
	} {
		got := r.Authorize(Attributes{User: sa, Verb: c.verb, Namespace: "default", APIGroup: c.group, Resource: c.resource, Subresource: c.sub}).Allowed
		if got != c.want {
			t.Errorf("%s %s/%s/%s: allowed %v, want %v", c.verb, c.group, c.resource, c.sub, got, c.want)
		}
	}
}

// TestDisruptionControllerRole: kube's
// system:controller:disruption-controller lets the disruption
// controller's ServiceAccount read budgets and the workloads whose scale
// it counts and write budgets' status, and nothing else: no budget spec,
// no pod deletion or eviction, no Secrets.
func TestDisruptionControllerRole(t *testing.T) {
	r, err := NewRBAC(RBACConfig{})
	if err != nil {
		t.Fatal(err)
	}
	crs, crbs := BootstrapPolicy()
	for _, cr := range crs {
		r.UpsertClusterRole(cr)
	}
	for _, crb := range crbs {
		r.UpsertClusterRoleBinding(crb)
	}
	sa := user("system:serviceaccount:kube-system:disruption-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system")
	for _, c := range []struct {
		verb, group, resource, sub string
		want                       bool
	}{
		{"list", "policy", "poddisruptionbudgets", "", true},
		{"update", "policy", "poddisruptionbudgets", "status", true},
		{"get", "apps", "deployments", "", true},
		{"get", "extensions", "replicasets", "", true},
		{"watch", "apps", "statefulsets", "", true},
		{"list", "", "replicationcontrollers", "", true},
		{"get", "apps", "deployments", "scale", true},
		{"update", "", "pods", "status", true},
		{"update", "policy", "poddisruptionbudgets", "", false},
		{"delete", "", "pods", "", false},
		{"create", "", "pods", "eviction", false},
		{"get", "", "secrets", "", false},
		{"update", "apps", "deployments", "scale", false},
	} {
		got := r.Authorize(Attributes{User: sa, Verb: c.verb, Namespace: "default", APIGroup: c.group, Resource: c.resource, Subresource: c.sub}).Allowed
		if got != c.want {
			t.Errorf("%s %s/%s/%s: allowed %v, want %v", c.verb, c.group, c.resource, c.sub, got, c.want)
		}
	}
}

// TestTTLAfterFinishedControllerRole: kube's
// system:controller:ttl-after-finished-controller lets the controller's
// ServiceAccount read and delete Jobs and nothing else: no pods, no
// update of a Job, no CronJobs, no Secrets.
func TestTTLAfterFinishedControllerRole(t *testing.T) {
	r, err := NewRBAC(RBACConfig{})
	if err != nil {
		t.Fatal(err)
	}
	crs, crbs := BootstrapPolicy()
	for _, cr := range crs {
		r.UpsertClusterRole(cr)
	}
	for _, crb := range crbs {
		r.UpsertClusterRoleBinding(crb)
	}
	sa := user("system:serviceaccount:kube-system:ttl-after-finished-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system")
	for _, c := range []struct {
		verb, group, resource string
		want                  bool
	}{
		{"get", "batch", "jobs", true},
		{"watch", "batch", "jobs", true},
		{"delete", "batch", "jobs", true},
		{"create", "", "events", true},
		{"update", "batch", "jobs", false},
		{"create", "batch", "jobs", false},
		{"delete", "batch", "cronjobs", false},
		{"delete", "", "pods", false},
		{"get", "", "secrets", false},
	} {
		got := r.Authorize(Attributes{User: sa, Verb: c.verb, Namespace: "default", APIGroup: c.group, Resource: c.resource}).Allowed
		if got != c.want {
			t.Errorf("%s %s/%s: allowed %v, want %v", c.verb, c.group, c.resource, got, c.want)
		}
	}
}

// TestBootstrapRolesAutoscalingAndDelegation: view reads and edit writes
// HorizontalPodAutoscalers, and system:auth-delegator lets an extension
// API server review tokens and access, as kube's bootstrap policy.
func TestBootstrapRolesAutoscalingAndDelegation(t *testing.T) {
	crs, _ := BootstrapPolicy()
	r, err := NewRBAC(RBACConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cr := range crs {
		r.UpsertClusterRole(cr)
	}
	bind := func(role, subject string) {
		r.UpsertClusterRoleBinding(&corev1.ClusterRoleBinding{Metadata: &corev1.ObjectMeta{Name: role + "-" + subject},
			Subjects: []*corev1.Subject{{Kind: SubjectUser, ApiGroup: "rbac.authorization.k8s.io", Name: subject}},
			RoleRef:  &corev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: KindClusterRole, Name: role}})
	}
	bind(ClusterRoleView, "viewer")
	bind(ClusterRoleEdit, "editor")
	bind("system:auth-delegator", "wardle")
	tests := []struct {
		given Attributes
		want  bool
	}{
		{Attributes{User: user("viewer"), Verb: "list", Namespace: "ns", APIGroup: "autoscaling", Resource: "horizontalpodautoscalers"}, true},
		{Attributes{User: user("viewer"), Verb: "get", Namespace: "ns", APIGroup: "autoscaling", Resource: "horizontalpodautoscalers", Subresource: "status"}, true},
		{Attributes{User: user("viewer"), Verb: "create", Namespace: "ns", APIGroup: "autoscaling", Resource: "horizontalpodautoscalers"}, false},
		{Attributes{User: user("editor"), Verb: "create", Namespace: "ns", APIGroup: "autoscaling", Resource: "horizontalpodautoscalers"}, true},
		{Attributes{User: user("wardle"), Verb: "create", APIGroup: "authentication.k8s.io", Resource: "tokenreviews"}, true},
		{Attributes{User: user("wardle"), Verb: "create", APIGroup: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true},
		{Attributes{User: user("wardle"), Verb: "list", Namespace: "ns", Resource: "secrets"}, false},
	}
	for _, tc := range tests {
		if got := r.Authorize(tc.given).Allowed; got != tc.want {
			t.Errorf("%s %s %s/%s: allowed %t, want %t", tc.given.User.GetUsername(), tc.given.Verb, tc.given.Resource, tc.given.Subresource, got, tc.want)
		}
	}
}

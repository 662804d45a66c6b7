package auth

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// TestCovers: component-helpers' Covers cases: wildcards, subresources and
// "*/sub", resource names (an unnamed owner rule covers named ones, not
// the reverse), non-resource URL prefixes, and the uncovered broken-down
// rules.
func TestCovers(t *testing.T) {
	url := func(verbs []string, urls ...string) *corev1.PolicyRule {
		return &corev1.PolicyRule{Verbs: verbs, NonResourceUrls: urls}
	}
	tests := []struct {
		name        string
		owner       []*corev1.PolicyRule
		servant     []*corev1.PolicyRule
		want        bool
		wantMissing []string // CompactString of the uncovered subrules
	}{
		{"star covers all", []*corev1.PolicyRule{rule(s("*"), s("*"), s("*"), nil)},
			[]*corev1.PolicyRule{rule(s("get", "delete"), s("", "apps"), s("pods", "deployments/scale"), s("x"))}, true, nil},
		{"exact match", []*corev1.PolicyRule{rule(s("get", "list"), s(""), s("pods"), nil)},
			[]*corev1.PolicyRule{rule(s("get"), s(""), s("pods"), nil)}, true, nil},
		{"split over two owner rules", []*corev1.PolicyRule{rule(s("get"), s(""), s("pods"), nil), rule(s("list"), s(""), s("pods"), nil)},
			[]*corev1.PolicyRule{rule(s("get", "list"), s(""), s("pods"), nil)}, true, nil},
		{"missing verb", []*corev1.PolicyRule{rule(s("get"), s(""), s("pods"), nil)},
			[]*corev1.PolicyRule{rule(s("get", "delete"), s(""), s("pods"), nil)}, false,
			[]string{`{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}`}},
		{"owner star does not grow a servant star", []*corev1.PolicyRule{rule(s("get", "list"), s("*"), s("*"), nil)},
			[]*corev1.PolicyRule{rule(s("*"), s(""), s("pods"), nil)}, false,
			[]string{`{APIGroups:[""], Resources:["pods"], Verbs:["*"]}`}},
		{"other group", []*corev1.PolicyRule{rule(s("get"), s(""), s("pods"), nil)},
			[]*corev1.PolicyRule{rule(s("get"), s("apps"), s("pods"), nil)}, false,
			[]string{`{APIGroups:["apps"], Resources:["pods"], Verbs:["get"]}`}},
		{"resource does not cover its subresource", []*corev1.PolicyRule{rule(s("get"), s(""), s("pods"), nil)},
			[]*corev1.PolicyRule{rule(s("get"), s(""), s("pods/log"), nil)}, false,
			[]string{`{APIGroups:[""], Resources:["pods/log"], Verbs:["get"]}`}},
		{"*/sub covers the subresource of any resource", []*corev1.PolicyRule{rule(s("get"), s(""), s("*/log"), nil)},
			[]*corev1.PolicyRule{rule(s("get"), s(""), s("pods/log", "nodes/log"), nil)}, true, nil},
		{"unnamed owner covers a named servant", []*corev1.PolicyRule{rule(s("get"), s(""), s("secrets"), nil)},
			[]*corev1.PolicyRule{rule(s("get"), s(""), s("secrets"), s("a", "b"))}, true, nil},
		{"named owner covers its names only", []*corev1.PolicyRule{rule(s("get"), s(""), s("secrets"), s("a"))},
			[]*corev1.PolicyRule{rule(s("get"), s(""), s("secrets"), s("a", "b"))}, false,
			[]string{`{APIGroups:[""], Resources:["secrets"], ResourceNames:["b"], Verbs:["get"]}`}},
		{"named owner does not cover an unnamed servant", []*corev1.PolicyRule{rule(s("get"), s(""), s("secrets"), s("a"))},
			[]*corev1.PolicyRule{rule(s("get"), s(""), s("secrets"), nil)}, false,
			[]string{`{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`}},
		{"non-resource URL prefix", []*corev1.PolicyRule{url(s("get"), "/healthz/*")},
			[]*corev1.PolicyRule{url(s("get"), "/healthz/ready", "/healthz/")}, true, nil},
		{"non-resource URL not covered by a resource rule", []*corev1.PolicyRule{rule(s("*"), s("*"), s("*"), nil)},
			[]*corev1.PolicyRule{url(s("get"), "/metrics")}, false, []string{`{NonResourceURLs:["/metrics"], Verbs:["get"]}`}},
		{"no owner rules", nil, []*corev1.PolicyRule{rule(s("create", "get"), s(""), s("pods"), nil)}, false,
			[]string{`{APIGroups:[""], Resources:["pods"], Verbs:["create"]}`, `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`}},
		{"empty servant", nil, nil, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, missing := Covers(tt.owner, tt.servant)
			var ms []string
			for _, m := range missing {
				ms = append(ms, CompactString(m))
			}
			if got != tt.want || !slices.Equal(ms, tt.wantMissing) {
				t.Errorf("Covers = %v, missing %q; want %v, %q", got, ms, tt.want, tt.wantMissing)
			}
		})
	}
}

// TestCompactRules: simple rules differing by verb merge; named and
// multi-resource rules stay as they are.
func TestCompactRules(t *testing.T) {
	in := []*corev1.PolicyRule{
		rule(s("get"), s(""), s("pods"), nil),
		rule(s("list"), s(""), s("pods"), nil),
		rule(s("get"), s(""), s("secrets"), s("a")),
		rule(s("list"), s(""), s("secrets"), s("a")),
		rule(s("get"), s(""), s("pods", "services"), nil),
	}
	var got []string
	for _, r := range CompactRules(in) {
		got = append(got, CompactString(r))
	}
	want := []string{
		`{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}`,
		`{APIGroups:[""], Resources:["secrets"], ResourceNames:["a"], Verbs:["get" "list"]}`,
		`{APIGroups:[""], Resources:["pods" "services"], Verbs:["get"]}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("CompactRules = %q, want %q", got, want)
	}
	if in[0].GetVerbs()[0] != "get" || len(in[0].GetVerbs()) != 1 {
		t.Error("CompactRules changed its input")
	}
}

// escalationPolicy: in namespace dev, mallory may create and update Roles
// and RoleBindings and get pods; erin may also escalate roles there and
// bind the ClusterRole cluster-admin by name in dev; frank may create
// ClusterRoleBindings and bind any clusterrole.
func escalationPolicy(t *testing.T) *RBAC {
	t.Helper()
	r := policy(t)
	rbacWrite := rule(s("create", "update", "patch"), s(RBACGroup), s("roles", "rolebindings"), nil)
	r.UpsertRole(&corev1.Role{Metadata: meta("dev", "rbac-writer"), Rules: []*corev1.PolicyRule{
		rbacWrite, rule(s("get"), s(""), s("pods"), nil),
	}})
	r.UpsertRole(&corev1.Role{Metadata: meta("dev", "escalator"), Rules: []*corev1.PolicyRule{
		rbacWrite, rule(s(VerbEscalate), s(RBACGroup), s("roles"), nil),
		rule(s(VerbBind), s(RBACGroup), s("clusterroles"), s(ClusterRoleClusterAdmin)),
	}})
	r.UpsertRole(&corev1.Role{Metadata: meta("dev", "pod-getter"), Rules: []*corev1.PolicyRule{rule(s("get"), s(""), s("pods"), nil)}})
	r.UpsertClusterRole(&corev1.ClusterRole{Metadata: meta("", "crb-binder"), Rules: []*corev1.PolicyRule{
		rule(s("create"), s(RBACGroup), s("clusterrolebindings"), nil),
		rule(s(VerbBind), s(RBACGroup), s("clusterroles"), nil),
	}})
	bind := func(ns, name, role, who string) {
		r.UpsertRoleBinding(&corev1.RoleBinding{Metadata: meta(ns, name),
			Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: who}}, RoleRef: &corev1.RoleRef{Kind: KindRole, Name: role}})
	}
	bind("dev", "mallory", "rbac-writer", "mallory")
	bind("dev", "erin", "escalator", "erin")
	r.UpsertClusterRoleBinding(&corev1.ClusterRoleBinding{Metadata: meta("", "frank"),
		Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "frank"}},
		RoleRef:  &corev1.RoleRef{Kind: KindClusterRole, Name: "crb-binder"}})
	return r
}

// TestCheckRBACWrite is the escalation attack table: each write the
// requester's own rules do not cover is Forbidden with Kubernetes'
// message, unless it holds escalate (roles) or bind (bindings) or is a
// superuser.
func TestCheckRBACWrite(t *testing.T) {
	r := escalationPolicy(t)
	star := []*corev1.PolicyRule{rule(s("*"), s("*"), s("*"), nil)}
	role := func(ns string, rules []*corev1.PolicyRule) *corev1.Role {
		return &corev1.Role{Metadata: meta(ns, "r"), Rules: rules}
	}
	rb := func(ns, kind, name string) *corev1.RoleBinding {
		return &corev1.RoleBinding{Metadata: meta(ns, "b"), Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "mallory"}},
			RoleRef: &corev1.RoleRef{ApiGroup: RBACGroup, Kind: kind, Name: name}}
	}
	crb := func(name string) *corev1.ClusterRoleBinding {
		return &corev1.ClusterRoleBinding{Metadata: meta("", "b"), Subjects: []*corev1.Subject{{Kind: SubjectUser, Name: "frank"}},
			RoleRef: &corev1.RoleRef{ApiGroup: RBACGroup, Kind: KindClusterRole, Name: name}}
	}
	mallory, erin, frank := user("mallory"), user("erin"), user("frank")
	tests := []struct {
		name        string
		user        *corev1.UserInfo
		obj, old    proto.Message
		wantMessage string // "" = allowed
	}{
		{"role granting * without escalate", mallory, role("dev", star), nil,
			`roles.rbac.authorization.k8s.io "r" is forbidden: user "mallory" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` +
				"\n" + `{APIGroups:["*"], Resources:["*"], Verbs:["*"]}`},
		{"role within own rules", mallory, role("dev", []*corev1.PolicyRule{rule(s("get"), s(""), s("pods"), nil)}), nil, ""},
		{"role with a rule held in another namespace only", user("alice"),
			role("dev", []*corev1.PolicyRule{rule(s("create"), s(""), s("pods"), nil)}), nil, "is attempting to grant"},
		{"role granting * with escalate", erin, role("dev", star), nil, ""},
		{"escalate in dev does not reach another namespace", erin, role("prod", star), nil, "is attempting to grant"},
		{"update adding rules", mallory, role("dev", star), role("dev", []*corev1.PolicyRule{rule(s("get"), s(""), s("pods"), nil)}), "is attempting to grant"},
		{"update changing only finalizers", mallory,
			&corev1.Role{Metadata: &corev1.ObjectMeta{Namespace: "dev", Name: "r", Finalizers: s("x")}, Rules: star}, role("dev", star), ""},
		{"clusterrole granting *", mallory, &corev1.ClusterRole{Metadata: meta("", "c"), Rules: star}, nil, "is attempting to grant"},
		{"superuser", user("root", GroupMasters), &corev1.ClusterRole{Metadata: meta("", "c"), Rules: star}, nil, ""},
		{"bind self to cluster-admin in dev", mallory, rb("dev", KindClusterRole, ClusterRoleClusterAdmin), nil,
			`rolebindings.rbac.authorization.k8s.io "b" is forbidden: user "mallory" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:`},
		{"bind a role whose rules are held", mallory, rb("dev", KindRole, "pod-getter"), nil, ""},
		{"bind a missing role", mallory, rb("dev", KindRole, "nope"), nil,
			`rolebindings.rbac.authorization.k8s.io "b" is forbidden: roles.rbac.authorization.k8s.io "nope" not found`},
		{"bind cluster-admin with bind on it", erin, rb("dev", KindClusterRole, ClusterRoleClusterAdmin), nil, ""},
		{"bind names cluster-admin only", erin, rb("dev", KindClusterRole, ClusterRoleAdmin), nil, "is attempting to grant"},
		{"bind granted in dev, binding in prod", erin, rb("prod", KindClusterRole, ClusterRoleClusterAdmin), nil, "is attempting to grant"},
		{"rebind an existing binding to cluster-admin", mallory, rb("dev", KindClusterRole, ClusterRoleClusterAdmin), rb("dev", KindRole, "pod-getter"), "is attempting to grant"},
		{"clusterrolebinding with bind on all clusterroles", frank, crb(ClusterRoleClusterAdmin), nil, ""},
		{"clusterrolebinding without bind", mallory, crb(ClusterRoleClusterAdmin), nil, "is attempting to grant"},
		{"other kinds pass", mallory, &corev1.ConfigMap{Metadata: meta("dev", "c")}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := r.CheckRBACWrite(tt.user, tt.obj, tt.old, nil)
			if tt.wantMessage == "" {
				if st != nil {
					t.Fatalf("refused: %s", st.GetMessage())
				}
				return
			}
			if st == nil {
				t.Fatal("allowed, want Forbidden")
			}
			if st.GetCode() != 403 || st.GetReason() != eventsv1.ReasonForbidden || !strings.Contains(st.GetMessage(), tt.wantMessage) {
				t.Errorf("status %d %s %q, want 403 Forbidden containing %q", st.GetCode(), st.GetReason(), st.GetMessage(), tt.wantMessage)
			}
		})
	}
}

package api

import (
	"context"
	"strings"
	"testing"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
)

// escalationSeed: the bootstrap ClusterRoles, and in namespace dev a Role
// letting mallory and erin write Roles and RoleBindings and get pods;
// erin may also escalate roles and bind the ClusterRole cluster-admin.
func escalationSeed() []objects.Object {
	var out []objects.Object
	crs, crbs := auth.BootstrapPolicy()
	for _, cr := range crs {
		out = append(out, cr)
	}
	for _, crb := range crbs {
		out = append(out, crb)
	}
	writer := []*corev1.PolicyRule{
		{Verbs: []string{"create", "update", "patch", "get"}, ApiGroups: []string{auth.RBACGroup}, Resources: []string{"roles", "rolebindings"}},
		{Verbs: []string{"get"}, ApiGroups: []string{""}, Resources: []string{"pods"}},
	}
	escalator := append([]*corev1.PolicyRule{
		{Verbs: []string{auth.VerbEscalate}, ApiGroups: []string{auth.RBACGroup}, Resources: []string{"roles"}},
		{Verbs: []string{auth.VerbBind}, ApiGroups: []string{auth.RBACGroup}, Resources: []string{"clusterroles"}, ResourceNames: []string{auth.ClusterRoleClusterAdmin}},
	}, writer...)
	role := func(name string, rules []*corev1.PolicyRule) *corev1.Role {
		return &corev1.Role{Metadata: &corev1.ObjectMeta{Namespace: "dev", Name: name}, Rules: rules}
	}
	bind := func(user, roleName string) *corev1.RoleBinding {
		return &corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Namespace: "dev", Name: user},
			Subjects: []*corev1.Subject{{Kind: auth.SubjectUser, Name: user}},
			RoleRef:  &corev1.RoleRef{ApiGroup: auth.RBACGroup, Kind: auth.KindRole, Name: roleName}}
	}
	return append(out, role("writer", writer), role("escalator", escalator), bind("mallory", "writer"), bind("erin", "escalator"))
}

// TestEscalation is the RBAC escalation attack on the bus object path: a
// user allowed to write RoleBindings and Roles in dev can neither bind
// itself to cluster-admin nor write a role granting "*", by create or by
// update, unless it holds bind on cluster-admin or escalate on roles; the
// refusal is Kubernetes' 403, and the store is left as it was.
func TestEscalation(t *testing.T) {
	f := newFixture(t, escalationSeed()...)
	ctx := context.Background()
	star := []*corev1.PolicyRule{{Verbs: []string{"*"}, ApiGroups: []string{"*"}, Resources: []string{"*"}}}
	podGetter := []*corev1.PolicyRule{{Verbs: []string{"get"}, ApiGroups: []string{""}, Resources: []string{"pods"}}}
	role := func(name string, rules []*corev1.PolicyRule) *corev1.Role {
		return &corev1.Role{Metadata: &corev1.ObjectMeta{Name: name}, Rules: rules}
	}
	binding := func(name, who, kind, roleName string) *corev1.RoleBinding {
		return &corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Name: name},
			Subjects: []*corev1.Subject{{Kind: auth.SubjectUser, Name: who}},
			RoleRef:  &corev1.RoleRef{ApiGroup: auth.RBACGroup, Kind: kind, Name: roleName}}
	}
	steps := []struct {
		name     string
		req      *apiv1.ObjectRequest
		wantCode int32
		wantMsg  string
	}{
		{"bind self to cluster-admin", objectReq(malloryToken, "create", "rolebindings", "dev",
			binding("pwn", "mallory", auth.KindClusterRole, auth.ClusterRoleClusterAdmin)), 403,
			`rolebindings.rbac.authorization.k8s.io "pwn" is forbidden: user "mallory" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:`},
		{"apply a binding to cluster-admin", objectReq(malloryToken, "apply", "rolebindings", "dev",
			binding("pwn", "mallory", auth.KindClusterRole, auth.ClusterRoleClusterAdmin)), 403, "is attempting to grant"},
		{"bind with bind on cluster-admin", objectReq(erinToken, "create", "rolebindings", "dev",
			binding("erin-admin", "erin", auth.KindClusterRole, auth.ClusterRoleClusterAdmin)), 201, ""},
		{"role granting *", objectReq(malloryToken, "create", "roles", "dev", role("star", star)), 403,
			`roles.rbac.authorization.k8s.io "star" is forbidden: user "mallory" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` +
				"\n" + `{APIGroups:["*"], Resources:["*"], Verbs:["*"]}`},
		{"role within own rules", objectReq(malloryToken, "create", "roles", "dev", role("getter", podGetter)), 201, ""},
		{"update of that role to *", objectReq(malloryToken, "apply", "roles", "dev", role("getter", star)), 403, "is attempting to grant"},
		{"binding to a role whose rules are held", objectReq(malloryToken, "create", "rolebindings", "dev",
			binding("getter", "bob", auth.KindRole, "getter")), 201, ""},
		{"rebinding it to cluster-admin", objectReq(malloryToken, "apply", "rolebindings", "dev",
			binding("getter", "bob", auth.KindClusterRole, auth.ClusterRoleClusterAdmin)), 403, "is attempting to grant"},
		{"role granting * with escalate", objectReq(erinToken, "create", "roles", "dev", role("erin-star", star)), 201, ""},
		{"without create on roles, escalate is not enough", objectReq(erinToken, "create", "roles", "prod", role("x", star)), 403,
			`cannot create resource "roles"`},
	}
	for _, tt := range steps {
		t.Run(tt.name, func(t *testing.T) {
			before := f.kv.Revision()
			st, _ := f.s.object(ctx, tt.req)
			if st.GetCode() != tt.wantCode || !strings.Contains(st.GetMessage(), tt.wantMsg) {
				t.Fatalf("status %d %q, want %d containing %q", st.GetCode(), st.GetMessage(), tt.wantCode, tt.wantMsg)
			}
			if tt.wantCode == 403 {
				if st.GetReason() != eventsv1.ReasonForbidden {
					t.Errorf("reason %q, want Forbidden", st.GetReason())
				}
				if f.kv.Revision() != before {
					t.Error("a refused write changed the store")
				}
			}
		})
	}
	got, err := objects.Get[*corev1.Role](ctx, f.env.Store, "dev", "getter")
	if err != nil || len(got.GetRules()) != 1 || got.GetRules()[0].GetVerbs()[0] != "get" {
		t.Errorf("role getter after the refused update: %v, %v; want its own rule", got, err)
	}
}

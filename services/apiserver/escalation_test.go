package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
)

// TestHTTPSEscalation is the RBAC escalation attack over HTTPS: alice may
// create, update and patch Roles and RoleBindings in default, and get
// pods. She cannot bind herself to cluster-admin or write a role granting
// "*" — by POST, PUT or PATCH — until the admin gives her bind on
// cluster-admin or escalate on roles; each refusal is kube-apiserver's
// 403 "is attempting to grant RBAC permissions not currently held".
func TestHTTPSEscalation(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	writer := &corev1.Role{Metadata: &corev1.ObjectMeta{Name: "rbac-writer", Namespace: "default"}, Rules: []*corev1.PolicyRule{
		{Verbs: []string{"create", "update", "patch", "get"}, ApiGroups: []string{auth.RBACGroup}, Resources: []string{"roles", "rolebindings"}},
		{Verbs: []string{"get"}, ApiGroups: []string{""}, Resources: []string{"pods"}},
	}}
	seed := []objects.Object{writer} // the bootstrap policy is the bootstrap controller's
	for _, o := range append(seed,
		&corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Name: "alice-writes", Namespace: "default"},
			RoleRef:  &corev1.RoleRef{Kind: auth.KindRole, Name: "rbac-writer", ApiGroup: auth.RBACGroup},
			Subjects: []*corev1.Subject{{Kind: auth.SubjectUser, Name: "alice"}}},
	) {
		if _, err := s.store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	alice := s.client(t, aliceToken)
	rbac := s.url + "/apis/rbac.authorization.k8s.io/v1/namespaces/default/"
	roleJSON := func(name, verbs string) string {
		return fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":%q},
"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":[%s]}]}`, name, verbs)
	}
	bindingJSON := func(name, kind, role string) string {
		return fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":%q},
"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":%q,"name":%q},"subjects":[{"kind":"User","name":"alice"}]}`, name, kind, role)
	}
	// The api stage's RBAC cache follows the store: wait until alice may
	// create roles (the first step then succeeds).
	waitAllowed := func(method, url, ct, body string) {
		t.Helper()
		for {
			code, out, _ := do(t, alice, method, url, ct, body)
			if code < 300 {
				return
			}
			if code != 403 || ctx.Err() != nil {
				t.Fatalf("%s %s: %d %v", method, url, code, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// A role alice's own rules cover (get pods), and a binding to it.
	waitAllowed("POST", rbac+"roles", "application/json",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"getter"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}`)
	waitAllowed("POST", rbac+"rolebindings", "application/json", bindingJSON("getter", auth.KindRole, "getter"))

	const grant = "is attempting to grant RBAC permissions not currently held"
	attacks := []struct {
		name, method, url, contentType, body string
		wantMsg                              string
	}{
		{"POST a binding to cluster-admin", "POST", rbac + "rolebindings", "application/json",
			bindingJSON("pwn", auth.KindClusterRole, auth.ClusterRoleClusterAdmin),
			`rolebindings.rbac.authorization.k8s.io "pwn" is forbidden: user "alice" (groups=["devs" "system:authenticated"]) ` + grant},
		{"PUT a binding onto cluster-admin", "PUT", rbac + "rolebindings/getter", "application/json",
			bindingJSON("getter", auth.KindClusterRole, auth.ClusterRoleClusterAdmin), grant},
		{"PATCH a binding onto cluster-admin", "PATCH", rbac + "rolebindings/getter", "application/merge-patch+json",
			`{"roleRef":{"kind":"ClusterRole","name":"cluster-admin"}}`, grant},
		{"server-side apply of a new binding to cluster-admin", "PATCH", rbac + "rolebindings/pwn2?fieldManager=x", "application/apply-patch+yaml",
			bindingJSON("pwn2", auth.KindClusterRole, auth.ClusterRoleClusterAdmin), grant},
		{"POST a role granting *", "POST", rbac + "roles", "application/json", roleJSON("star", `"*"`),
			`roles.rbac.authorization.k8s.io "star" is forbidden: user "alice" (groups=["devs" "system:authenticated"]) ` + grant +
				":\n" + `{APIGroups:["*"], Resources:["*"], Verbs:["*"]}`},
		{"PUT a role to *", "PUT", rbac + "roles/getter", "application/json", roleJSON("getter", `"*"`), grant},
		{"PATCH a role to *", "PATCH", rbac + "roles/getter", "application/merge-patch+json",
			`{"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}`, grant},
		{"dry-run POST of a binding to cluster-admin", "POST", rbac + "rolebindings?dryRun=All", "application/json",
			bindingJSON("pwn3", auth.KindClusterRole, auth.ClusterRoleClusterAdmin), grant},
		{"dry-run PATCH of a role to *", "PATCH", rbac + "roles/getter?dryRun=All", "application/merge-patch+json",
			`{"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}`, grant},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			code, out, _ := do(t, alice, a.method, a.url, a.contentType, a.body)
			if code != 403 || out["reason"] != "Forbidden" || !strings.Contains(fmt.Sprint(out["message"]), a.wantMsg) {
				t.Fatalf("%s %s: %d %v; want 403 Forbidden containing %q", a.method, a.url, code, out, a.wantMsg)
			}
		})
	}
	role, err := objects.Get[*corev1.Role](ctx, s.store, "default", "getter")
	if err != nil || len(role.GetRules()) != 1 || role.GetRules()[0].GetVerbs()[0] != "get" {
		t.Fatalf("role getter after the refused writes: %v, %v", role, err)
	}

	// With bind on cluster-admin and escalate on roles, the same writes pass.
	writer.Rules = append(writer.Rules,
		&corev1.PolicyRule{Verbs: []string{auth.VerbBind}, ApiGroups: []string{auth.RBACGroup}, Resources: []string{"clusterroles"}, ResourceNames: []string{auth.ClusterRoleClusterAdmin}},
		&corev1.PolicyRule{Verbs: []string{auth.VerbEscalate}, ApiGroups: []string{auth.RBACGroup}, Resources: []string{"roles"}})
	cur, err := objects.Get[*corev1.Role](ctx, s.store, "default", "rbac-writer")
	if err != nil {
		t.Fatal(err)
	}
	objects.SetRevision(writer, objects.Revision(cur))
	if _, err := s.store.Update(ctx, writer); err != nil {
		t.Fatal(err)
	}
	waitAllowed("POST", rbac+"rolebindings", "application/json", bindingJSON("bound", auth.KindClusterRole, auth.ClusterRoleClusterAdmin))
	waitAllowed("PUT", rbac+"roles/getter", "application/json", roleJSON("getter", `"*"`))
	// A dry run that passes every check answers the object and stores nothing.
	code, out, _ := do(t, alice, "POST", rbac+"rolebindings?dryRun=All", "application/json", bindingJSON("dry", auth.KindClusterRole, auth.ClusterRoleClusterAdmin))
	if code != 201 || path(out, "metadata.name") != "dry" {
		t.Fatalf("allowed dry run: %d %v", code, out)
	}
	if _, err := objects.Get[*corev1.RoleBinding](ctx, s.store, "default", "dry"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Fatalf("a dry-run binding was stored: %v", err)
	}
}

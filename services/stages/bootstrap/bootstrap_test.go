package bootstrap_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/bootstrap"
)

func controllers(t *testing.T, n int) (*objects.Store, []*bootstrap.Controller) {
	t.Helper()
	c := raftstoretest.MakeCluster(t, 1)
	st := objects.New(c.Client(t))
	var out []*bootstrap.Controller
	for range n {
		b, err := bootstrap.New(stage.Env{Store: st, Stage: "api", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, bootstrap.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return st, out
}

// TestSystemNamespacesAndPolicy: replicas passing at once create the
// system namespaces (Active, with the "kubernetes" finalizer and the
// metadata.name label) and the bootstrap RBAC policy once; a removed
// namespace comes back at the next pass.
func TestSystemNamespacesAndPolicy(t *testing.T) {
	st, cs := controllers(t, 3)
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			if err := c.Pass(ctx); err != nil {
				t.Errorf("pass: %v", err)
			}
		})
	}
	wg.Wait()
	for _, name := range bootstrap.SystemNamespaces {
		ns, err := objects.Get[*corev1.Namespace](ctx, st, "", name)
		if err != nil {
			t.Fatalf("namespace %s: %v", name, err)
		}
		if ns.GetStatus().GetPhase() != nslifecycle.PhaseActive || !slices.Contains(ns.GetSpec().GetFinalizers(), nslifecycle.FinalizerKubernetes) ||
			ns.GetMetadata().GetLabels()[bootstrap.LabelMetadataName] != name || ns.GetMetadata().GetUid() == "" {
			t.Errorf("namespace %s: %v", name, ns)
		}
	}
	roles, bindings := auth.BootstrapPolicy()
	for _, r := range roles {
		got, err := objects.Get[*corev1.ClusterRole](ctx, st, "", r.GetMetadata().GetName())
		if err != nil || !proto.Equal(&corev1.ClusterRole{Rules: got.GetRules()}, &corev1.ClusterRole{Rules: r.GetRules()}) {
			t.Errorf("clusterrole %s: %v %v", r.GetMetadata().GetName(), got, err)
		}
	}
	for _, b := range bindings {
		if _, err := objects.Get[*corev1.ClusterRoleBinding](ctx, st, "", b.GetMetadata().GetName()); err != nil {
			t.Errorf("clusterrolebinding %s: %v", b.GetMetadata().GetName(), err)
		}
	}
	// kube's namespaced bootstrap Role: an extension API server bound to
	// it may read the authentication ConfigMap, and only that one.
	reader, err := objects.Get[*corev1.Role](ctx, st, "kube-system", auth.RoleExtensionAuthReader)
	if err != nil {
		t.Fatalf("role kube-system/%s: %v", auth.RoleExtensionAuthReader, err)
	}
	wantRule := &corev1.PolicyRule{Verbs: []string{"get", "list", "watch"}, ApiGroups: []string{""}, Resources: []string{"configmaps"},
		ResourceNames: []string{"extension-apiserver-authentication"}}
	if len(reader.GetRules()) != 1 || !proto.Equal(reader.GetRules()[0], wantRule) {
		t.Errorf("role %s rules: %v", auth.RoleExtensionAuthReader, reader.GetRules())
	}

	// kube-node-lease is not immortal: deleted, it comes back.
	if _, err := st.Delete(ctx, objects.Namespaces, "", "kube-node-lease", 0); err != nil {
		t.Fatal(err)
	}
	if err := cs[0].Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Get[*corev1.Namespace](ctx, st, "", "kube-node-lease"); err != nil {
		t.Errorf("kube-node-lease after a pass: %v", err)
	}
}

// TestPolicyReconciled: a bootstrap role or binding annotated autoupdate
// gets back what the policy has and it lacks (a removed rule, a removed
// subject; a changed roleRef re-creates the binding), keeping what the
// user added; one annotated autoupdate "false" is left as the user made
// it.
func TestPolicyReconciled(t *testing.T) {
	st, cs := controllers(t, 1)
	ctx := context.Background()
	if err := cs[0].Pass(ctx); err != nil {
		t.Fatal(err)
	}
	edit, err := objects.Get[*corev1.ClusterRole](ctx, st, "", auth.ClusterRoleEdit)
	if err != nil {
		t.Fatal(err)
	}
	want := len(edit.GetRules())
	extra := &corev1.PolicyRule{Verbs: []string{"get"}, ApiGroups: []string{"example.com"}, Resources: []string{"widgets"}}
	edit.Rules = append(edit.Rules[1:], extra) // one bootstrap rule removed, one of the user's added
	if _, err := st.Update(ctx, edit); err != nil {
		t.Fatal(err)
	}
	view, err := objects.Get[*corev1.ClusterRole](ctx, st, "", auth.ClusterRoleView)
	if err != nil {
		t.Fatal(err)
	}
	view.Metadata.Annotations[auth.AnnotationAutoupdate] = "false"
	view.Rules = view.Rules[:1]
	if _, err := st.Update(ctx, view); err != nil {
		t.Fatal(err)
	}
	crb, err := objects.Get[*corev1.ClusterRoleBinding](ctx, st, "", auth.ClusterRoleClusterAdmin)
	if err != nil {
		t.Fatal(err)
	}
	crb.Subjects = []*corev1.Subject{{Kind: auth.SubjectUser, Name: "root", ApiGroup: auth.RBACGroup}}
	crb.RoleRef = &corev1.RoleRef{ApiGroup: auth.RBACGroup, Kind: auth.KindClusterRole, Name: auth.ClusterRoleView}
	if _, err := st.Update(ctx, crb); err != nil {
		t.Fatal(err)
	}

	reader, err := objects.Get[*corev1.Role](ctx, st, "kube-system", auth.RoleExtensionAuthReader)
	if err != nil {
		t.Fatal(err)
	}
	reader.Rules = nil
	if _, err := st.Update(ctx, reader); err != nil {
		t.Fatal(err)
	}

	if err := cs[0].Pass(ctx); err != nil {
		t.Fatal(err)
	}
	reader, _ = objects.Get[*corev1.Role](ctx, st, "kube-system", auth.RoleExtensionAuthReader)
	if covered, missing := auth.Covers(reader.GetRules(), auth.BootstrapNamespaceRoles()[0].GetRules()); !covered {
		t.Errorf("%s after a pass misses %v", auth.RoleExtensionAuthReader, missing)
	}
	edit, _ = objects.Get[*corev1.ClusterRole](ctx, st, "", auth.ClusterRoleEdit)
	roles, _ := auth.BootstrapPolicy()
	for _, r := range roles {
		if r.GetMetadata().GetName() == auth.ClusterRoleEdit {
			if covered, missing := auth.Covers(edit.GetRules(), r.GetRules()); !covered {
				t.Errorf("edit after a pass misses %v", missing)
			}
		}
	}
	if !slices.ContainsFunc(edit.GetRules(), func(r *corev1.PolicyRule) bool { return proto.Equal(r, extra) }) || len(edit.GetRules()) < want {
		t.Errorf("edit after a pass: %v", edit.GetRules())
	}
	view, _ = objects.Get[*corev1.ClusterRole](ctx, st, "", auth.ClusterRoleView)
	if len(view.GetRules()) != 1 {
		t.Errorf("view (autoupdate false) was reconciled: %v", view.GetRules())
	}
	crb, _ = objects.Get[*corev1.ClusterRoleBinding](ctx, st, "", auth.ClusterRoleClusterAdmin)
	if crb.GetRoleRef().GetName() != auth.ClusterRoleClusterAdmin || len(crb.GetSubjects()) != 1 || crb.GetSubjects()[0].GetName() != auth.GroupMasters {
		t.Errorf("cluster-admin binding after a pass: %v", crb)
	}
}

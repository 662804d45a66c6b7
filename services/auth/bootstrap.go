package auth

import "github.com/podflow/podflow/proto/corev1"

// Names of the bootstrap ClusterRoles.
const (
	ClusterRoleClusterAdmin = "cluster-admin"
	ClusterRoleAdmin        = "admin"
	ClusterRoleEdit         = "edit"
	ClusterRoleView         = "view"
)

var (
	readVerbs  = []string{"get", "list", "watch"}
	writeVerbs = []string{"create", "delete", "deletecollection", "patch", "update"}
)

// AnnotationAutoupdate on a bootstrap role or binding lets the bootstrap
// controller add back what the policy has and the object lacks ("false":
// leave it as the user made it), as kube-apiserver's bootstrap-roles hook.
const AnnotationAutoupdate = "rbac.authorization.kubernetes.io/autoupdate"

// BootstrapPolicy returns the RBAC objects the bootstrap controller
// (services/stages/bootstrap) keeps in every cluster:
//
//   - cluster-admin: every verb on every resource, bound to the group
//     system:masters by the ClusterRoleBinding "cluster-admin";
//   - admin, edit, view: the user-facing roles of Kubernetes, reduced to the
//     resources podflow serves, meant to be granted per namespace with a
//     RoleBinding (as in Kubernetes, view cannot read Secrets, edit cannot
//     touch RBAC, admin can manage Roles and RoleBindings).
//
// The objects are fresh on each call; the caller may modify them.
func BootstrapPolicy() (clusterRoles []*corev1.ClusterRole, clusterRoleBindings []*corev1.ClusterRoleBinding) {
	core := func(verbs []string, resources ...string) *corev1.PolicyRule {
		return &corev1.PolicyRule{Verbs: verbs, ApiGroups: []string{""}, Resources: resources}
	}
	group := func(g string, verbs []string, resources ...string) *corev1.PolicyRule {
		return &corev1.PolicyRule{Verbs: verbs, ApiGroups: []string{g}, Resources: resources}
	}
	all := func(v ...[]string) []string {
		var out []string
		for _, s := range v {
			out = append(out, s...)
		}
		return out
	}
	viewRules := func() []*corev1.PolicyRule {
		return []*corev1.PolicyRule{
			core(readVerbs, "pods", "pods/log", "pods/status", "services", "endpoints",
				"configmaps", "serviceaccounts", "events", "limitranges", "namespaces"),
			group("discovery.k8s.io", readVerbs, "endpointslices"),
			group("events.k8s.io", readVerbs, "events"),
			group("podflow.io", readVerbs, "sidecarpolicies"),
		}
	}
	editRules := func() []*corev1.PolicyRule {
		rw := all(readVerbs, writeVerbs)
		return append(viewRules(),
			core(rw, "pods", "services", "endpoints", "configmaps", "secrets", "serviceaccounts"),
			core([]string{"create"}, "serviceaccounts/token"),
			group("discovery.k8s.io", rw, "endpointslices"),
		)
	}
	adminRules := func() []*corev1.PolicyRule {
		rw := all(readVerbs, writeVerbs)
		return append(editRules(),
			group("rbac.authorization.k8s.io", rw, "roles", "rolebindings"),
			core(rw, "limitranges"),
			group("podflow.io", rw, "sidecarpolicies"),
		)
	}
	role := func(name string, rules []*corev1.PolicyRule) *corev1.ClusterRole {
		return &corev1.ClusterRole{
			Metadata: &corev1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
				Annotations: map[string]string{AnnotationAutoupdate: "true"}},
			Rules: rules,
		}
	}
	clusterRoles = []*corev1.ClusterRole{
		role(ClusterRoleClusterAdmin, []*corev1.PolicyRule{
			{Verbs: []string{All}, ApiGroups: []string{All}, Resources: []string{All}},
			{Verbs: []string{All}, NonResourceUrls: []string{All}},
		}),
		role(ClusterRoleAdmin, adminRules()),
		role(ClusterRoleEdit, editRules()),
		role(ClusterRoleView, viewRules()),
	}
	clusterRoleBindings = []*corev1.ClusterRoleBinding{{
		Metadata: &corev1.ObjectMeta{Name: ClusterRoleClusterAdmin, Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
			Annotations: map[string]string{AnnotationAutoupdate: "true"}},
		Subjects: []*corev1.Subject{{Kind: SubjectGroup, ApiGroup: "rbac.authorization.k8s.io", Name: GroupMasters}},
		RoleRef:  &corev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: KindClusterRole, Name: ClusterRoleClusterAdmin},
	}}
	return clusterRoles, clusterRoleBindings
}

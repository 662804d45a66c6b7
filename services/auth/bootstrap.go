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
				"configmaps", "serviceaccounts", "events", "limitranges", "namespaces",
				"replicationcontrollers", "replicationcontrollers/scale", "replicationcontrollers/status"),
			group("apps", readVerbs, "controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale",
				"deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets", "statefulsets/scale",
				"statefulsets/status"),
			group("batch", readVerbs, "cronjobs", "cronjobs/status", "jobs", "jobs/status"),
			group("autoscaling", readVerbs, "horizontalpodautoscalers", "horizontalpodautoscalers/status"),
			group("policy", readVerbs, "poddisruptionbudgets", "poddisruptionbudgets/status"),
			group("discovery.k8s.io", readVerbs, "endpointslices"),
			group("events.k8s.io", readVerbs, "events"),
		}
	}
	editRules := func() []*corev1.PolicyRule {
		rw := all(readVerbs, writeVerbs)
		return append(viewRules(),
			core(rw, "pods", "services", "endpoints", "configmaps", "secrets", "serviceaccounts",
				"replicationcontrollers", "replicationcontrollers/scale"),
			core([]string{"create"}, "serviceaccounts/token", "pods/eviction"),
			group("apps", rw, "daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets",
				"replicasets/scale", "statefulsets", "statefulsets/scale"),
			group("batch", rw, "cronjobs", "jobs"),
			group("autoscaling", rw, "horizontalpodautoscalers"),
			group("policy", rw, "poddisruptionbudgets"),
			group("discovery.k8s.io", rw, "endpointslices"),
		)
	}
	adminRules := func() []*corev1.PolicyRule {
		rw := all(readVerbs, writeVerbs)
		return append(editRules(),
			group("rbac.authorization.k8s.io", rw, "roles", "rolebindings"),
			core(rw, "limitranges"),
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
		// What an extension API server delegates to the api server:
		// authentication and authorization of its requests.
		role("system:auth-delegator", []*corev1.PolicyRule{
			group("authentication.k8s.io", []string{"create"}, "tokenreviews"),
			group("authorization.k8s.io", []string{"create"}, "subjectaccessreviews"),
		}),
	}
	clusterRoleBindings = []*corev1.ClusterRoleBinding{{
		Metadata: &corev1.ObjectMeta{Name: ClusterRoleClusterAdmin, Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
			Annotations: map[string]string{AnnotationAutoupdate: "true"}},
		Subjects: []*corev1.Subject{{Kind: SubjectGroup, ApiGroup: "rbac.authorization.k8s.io", Name: GroupMasters}},
		RoleRef:  &corev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: KindClusterRole, Name: ClusterRoleClusterAdmin},
	}}
	for _, c := range controllerPolicy(core, group) {
		name := ControllerRolePrefix + c.account
		clusterRoles = append(clusterRoles, role(name, c.rules))
		clusterRoleBindings = append(clusterRoleBindings, &corev1.ClusterRoleBinding{
			Metadata: &corev1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
				Annotations: map[string]string{AnnotationAutoupdate: "true"}},
			Subjects: []*corev1.Subject{{Kind: SubjectServiceAccount, Name: c.account, Namespace: "kube-system"}},
			RoleRef:  &corev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: KindClusterRole, Name: name},
		})
	}
	return clusterRoles, clusterRoleBindings
}

// ControllerRolePrefix begins the names of the workload controllers'
// ClusterRoles and their bindings, as kube's bootstrap policy names them
// ("system:controller:replicaset-controller").
const ControllerRolePrefix = "system:controller:"

type controllerRole struct {
	account string // the controller's ServiceAccount in kube-system
	rules   []*corev1.PolicyRule
}

// controllerPolicy is kube's bootstrap policy of the workload controllers
// podflow runs (the ReplicaSet, ReplicationController, Job, CronJob,
// Deployment, StatefulSet and DaemonSet controllers, the garbage collector,
// the disruption and the TTL-after-finished controllers)
// (plugin/pkg/auth/authorizer/rbac/bootstrappolicy
// controller_policy.go): what each controller's ServiceAccount may do.
func controllerPolicy(core func([]string, ...string) *corev1.PolicyRule, group func(string, []string, ...string) *corev1.PolicyRule) []controllerRole {
	events := core([]string{"create", "patch", "update"}, "events")
	eventsV1 := group("events.k8s.io", []string{"create", "patch", "update"}, "events")
	return []controllerRole{
		{"replicaset-controller", []*corev1.PolicyRule{
			group("apps", []string{"get", "list", "watch", "update"}, "replicasets"),
			group("apps", []string{"update"}, "replicasets/status", "replicasets/finalizers"),
			core([]string{"list", "watch", "patch", "create", "delete"}, "pods"), events, eventsV1,
		}},
		{"deployment-controller", []*corev1.PolicyRule{
			group("apps", []string{"get", "list", "watch", "update"}, "deployments"),
			group("apps", []string{"update"}, "deployments/status", "deployments/finalizers"),
			group("apps", []string{"get", "list", "watch", "create", "update", "patch", "delete"}, "replicasets"),
			core([]string{"get", "list", "update", "watch"}, "pods"), events, eventsV1,
		}},
		{"replication-controller", []*corev1.PolicyRule{
			core([]string{"get", "list", "watch", "update"}, "replicationcontrollers"),
			core([]string{"update"}, "replicationcontrollers/status", "replicationcontrollers/finalizers"),
			core([]string{"list", "watch", "patch", "create", "delete"}, "pods"), events, eventsV1,
		}},
		{"job-controller", []*corev1.PolicyRule{
			group("batch", []string{"get", "list", "watch", "update", "patch"}, "jobs"),
			group("batch", []string{"update"}, "jobs/status", "jobs/finalizers"),
			core([]string{"list", "watch", "create", "delete", "patch"}, "pods"), events, eventsV1,
		}},
		{"cronjob-controller", []*corev1.PolicyRule{
			group("batch", []string{"get", "list", "watch", "update"}, "cronjobs"),
			group("batch", []string{"get", "list", "watch", "create", "update", "delete", "patch"}, "jobs"),
			group("batch", []string{"update"}, "cronjobs/status", "cronjobs/finalizers"),
			core([]string{"list", "delete"}, "pods"), events, eventsV1,
		}},
		{"statefulset-controller", []*corev1.PolicyRule{
			core([]string{"list", "watch"}, "pods"),
			group("apps", []string{"get", "list", "watch"}, "statefulsets"),
			group("apps", []string{"update"}, "statefulsets/status"),
			group("apps", []string{"update"}, "statefulsets/finalizers"),
			core([]string{"get", "create", "delete", "update", "patch"}, "pods"),
			group("apps", []string{"get", "create", "delete", "update", "patch", "list", "watch"}, "controllerrevisions"),
			core([]string{"get", "create", "list", "watch"}, "persistentvolumeclaims"),
			core([]string{"update", "delete"}, "persistentvolumeclaims"),
			core([]string{"update"}, "pods/finalizers"),
			events, eventsV1,
		}},
		{"disruption-controller", []*corev1.PolicyRule{
			{Verbs: []string{"get", "list", "watch"}, ApiGroups: []string{"extensions", "apps"}, Resources: []string{"deployments"}},
			{Verbs: []string{"get", "list", "watch"}, ApiGroups: []string{"apps", "extensions"}, Resources: []string{"replicasets"}},
			core([]string{"get", "list", "watch"}, "replicationcontrollers"),
			group("policy", []string{"get", "list", "watch"}, "poddisruptionbudgets"),
			group("apps", []string{"get", "list", "watch"}, "statefulsets"),
			group("policy", []string{"update"}, "poddisruptionbudgets/status"),
			core([]string{"patch", "update"}, "pods/status"),
			group("*", []string{"get"}, "*/scale"), events, eventsV1,
		}},
		{"daemon-set-controller", []*corev1.PolicyRule{
			group("apps", []string{"get", "list", "watch"}, "daemonsets"),
			group("apps", []string{"update"}, "daemonsets/status"),
			group("apps", []string{"update"}, "daemonsets/finalizers"),
			core([]string{"list", "watch"}, "nodes"),
			core([]string{"list", "watch", "create", "delete", "patch"}, "pods"),
			core([]string{"create"}, "pods/binding"),
			group("apps", []string{"get", "list", "watch", "create", "delete", "update", "patch"}, "controllerrevisions"),
			events, eventsV1,
		}},
		{"generic-garbage-collector", []*corev1.PolicyRule{
			group("*", []string{"get", "list", "watch", "patch", "update", "delete"}, "*"), events, eventsV1,
		}},
		{"ttl-after-finished-controller", []*corev1.PolicyRule{
			group("batch", []string{"get", "list", "watch", "delete"}, "jobs"), events, eventsV1,
		}},
	}
}

// ExtensionAPIServerAuthentication is the kube-system ConfigMap the api
// server publishes its client CA and front-proxy (requestheader)
// settings in, for extension API servers, as kube-apiserver's
// ClientCARegistrationHook; RoleExtensionAuthReader is the bootstrap
// Role that may read it.
const (
	ExtensionAPIServerAuthentication = "extension-apiserver-authentication"
	RoleExtensionAuthReader          = "extension-apiserver-authentication-reader"
)

// BootstrapNamespaceRoles returns the namespaced Roles of the bootstrap
// policy, as kube's NewBootstrapNamespaceRoles: in kube-system,
// extension-apiserver-authentication-reader, which may read the
// extension-apiserver-authentication ConfigMap (an extension API server
// is bound to it to learn whom to trust). Fresh on each call.
func BootstrapNamespaceRoles() []*corev1.Role {
	return []*corev1.Role{{
		Metadata: &corev1.ObjectMeta{Name: RoleExtensionAuthReader, Namespace: "kube-system",
			Labels:      map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
			Annotations: map[string]string{AnnotationAutoupdate: "true"}},
		Rules: []*corev1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, ApiGroups: []string{""},
			Resources: []string{"configmaps"}, ResourceNames: []string{ExtensionAPIServerAuthentication}}},
	}}
}

package validate_test

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/validate"
)

// TestObjectUpdate: what kube-apiserver refuses to change once stored,
// with its messages; everything else passes.
func TestObjectUpdate(t *testing.T) {
	yes := true
	cm := func(immutable *bool, v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "c"}, Immutable: immutable, Data: map[string]string{"k": v}}
	}
	sec := func(immutable *bool, typ, v string) *corev1.Secret {
		return &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "s"}, Immutable: immutable, Type: typ, Data: map[string][]byte{"k": []byte(v)}}
	}
	ref := func(kind, name string) *corev1.RoleRef {
		return &corev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: kind, Name: name}
	}
	never := "Never"
	pc := func(value int32, policy *string, desc string) *corev1.PriorityClass {
		return &corev1.PriorityClass{Metadata: &corev1.ObjectMeta{Name: "p"}, Value: value, PreemptionPolicy: policy, Description: desc}
	}
	rb := func(r *corev1.RoleRef) *corev1.RoleBinding {
		return &corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Name: "b"}, RoleRef: r}
	}
	for _, tc := range []struct {
		name     string
		obj, old objects.Object
		want     string // "": allowed
	}{
		{"mutable ConfigMap", cm(nil, "2"), cm(nil, "1"), ""},
		{"made immutable", cm(&yes, "2"), cm(nil, "1"), ""},
		{"immutable unchanged", cm(&yes, "1"), cm(&yes, "1"), ""},
		{"immutable data", cm(&yes, "2"), cm(&yes, "1"),
			"ConfigMap \"c\" is invalid: data: Forbidden: field is immutable when `immutable` is set"},
		{"immutable unset", cm(nil, "1"), cm(&yes, "1"),
			"ConfigMap \"c\" is invalid: immutable: Forbidden: field is immutable when `immutable` is set"},
		{"immutable Secret data", sec(&yes, "", "2"), sec(&yes, "Opaque", "1"),
			"Secret \"s\" is invalid: data: Forbidden: field is immutable when `immutable` is set"},
		{"Secret type", sec(nil, "kubernetes.io/tls", "1"), sec(nil, "", "1"),
			"Secret \"s\" is invalid: type: Invalid value: \"kubernetes.io/tls\": field is immutable"},
		{"Secret type defaulted", sec(nil, "Opaque", "2"), sec(nil, "", "1"), ""},
		{"roleRef", rb(ref("Role", "b")), rb(ref("Role", "a")),
			"RoleBinding.rbac.authorization.k8s.io \"b\" is invalid: roleRef: Invalid value: {\"APIGroup\":\"rbac.authorization.k8s.io\",\"Kind\":\"Role\",\"Name\":\"b\"}: field is immutable"},
		{"roleRef unchanged", rb(ref("Role", "a")), rb(ref("Role", "a")), ""},
		{"cluster roleRef", &corev1.ClusterRoleBinding{Metadata: &corev1.ObjectMeta{Name: "b"}, RoleRef: ref("ClusterRole", "x")},
			&corev1.ClusterRoleBinding{Metadata: &corev1.ObjectMeta{Name: "b"}, RoleRef: ref("ClusterRole", "y")},
			"ClusterRoleBinding.rbac.authorization.k8s.io \"b\" is invalid: roleRef: Invalid value: {\"APIGroup\":\"rbac.authorization.k8s.io\",\"Kind\":\"ClusterRole\",\"Name\":\"x\"}: field is immutable"},
		{"PriorityClass description", pc(1, nil, "new"), pc(1, nil, "old"), ""},
		{"PriorityClass value", pc(10, nil, ""), pc(1, nil, ""),
			"PriorityClass.scheduling.k8s.io \"p\" is invalid: value: Forbidden: may not be changed in an update."},
		{"PriorityClass preemptionPolicy", pc(1, &never, ""), pc(1, nil, ""),
			"PriorityClass.scheduling.k8s.io \"p\" is invalid: preemptionPolicy: Invalid value: \"Never\": field is immutable"},
	} {
		st := validate.ObjectUpdate(tc.obj, tc.old)
		if st.GetMessage() != tc.want || (tc.want != "" && st.GetCode() != 422) {
			t.Errorf("%s: %v\nwant %s", tc.name, st, tc.want)
		}
	}
}

package api

import (
	"context"
	"strings"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// TestImmutableUpdates: through the api stage, an immutable ConfigMap's
// data and a role binding's roleRef cannot change (kube-apiserver's 422),
// whoever asks; the stored objects stay as they were.
func TestImmutableUpdates(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	yes := true
	cm := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "frozen"}, Immutable: &yes, Data: map[string]string{"k": v}}
	}
	if st, _ := f.s.objectAs(ctx, masters, objectReq("", "create", "configmaps", "team", cm("1"))); st.GetCode() != 201 {
		t.Fatal(st)
	}
	st, _ := f.s.objectAs(ctx, masters, objectReq("", "apply", "configmaps", "team", cm("2")))
	if st.GetCode() != 422 || st.GetMessage() != "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set" {
		t.Fatalf("immutable ConfigMap: %v", st)
	}
	got, _ := objects.Get[*corev1.ConfigMap](ctx, f.env.Store, "team", "frozen")
	if got.GetData()["k"] != "1" {
		t.Fatalf("stored %v", got.GetData())
	}

	// The fixture's binding team/dev refers to Role dev.
	rb, err := objects.Get[*corev1.RoleBinding](ctx, f.env.Store, "team", "dev")
	if err != nil {
		t.Fatal(err)
	}
	rb.RoleRef.Name = "builder"
	st, _ = f.s.objectAs(ctx, masters, objectReq("", "update", "rolebindings", "team", rb))
	if st.GetCode() != 422 || !strings.HasSuffix(st.GetMessage(), `roleRef: Invalid value: {"APIGroup":"rbac.authorization.k8s.io","Kind":"Role","Name":"builder"}: field is immutable`) {
		t.Fatalf("roleRef change: %v", st)
	}
	if again, _ := objects.Get[*corev1.RoleBinding](ctx, f.env.Store, "team", "dev"); again.GetRoleRef().GetName() != "dev" {
		t.Fatalf("stored roleRef %v", again.GetRoleRef())
	}
}

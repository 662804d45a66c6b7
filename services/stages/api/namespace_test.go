package api

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
)

// deleteBeforeTxn is a store whose first transaction writing under
// prefix is preceded by a DELETE of the namespace ns: the DELETE lands
// between the api stage's read of the namespace and its write.
type deleteBeforeTxn struct {
	objects.KV
	ns, prefix string
	once       sync.Once
}

func (k *deleteBeforeTxn) Txn(ctx context.Context, t raftstore.Txn) (int64, error) {
	for _, op := range t.Ops {
		if strings.HasPrefix(op.Key, k.prefix) {
			k.once.Do(func() { nslifecycle.Delete(ctx, objects.FromKV(k.KV), k.ns) })
		}
	}
	return k.KV.Txn(ctx, t)
}

// TestCreateRacingNamespaceDeletion: a namespace deleted after the api
// stage found it active, but before its write of new content there, still
// refuses the content (the write compares the namespace's revision).
//
// The namespace controller deletes a terminating namespace's content and
// then the namespace: whenever that reached the api stage before its
// second look, RBAC's 403 (alice's RoleBinding in "team" gone;
// authorization comes before NamespaceLifecycle, as in kube-apiserver) or
// 404 (the namespace gone) answered instead. So alice may write ConfigMaps
// by a ClusterRoleBinding here, and a finalizer of another controller on
// the namespace keeps "team" terminating.
func TestCreateRacingNamespaceDeletion(t *testing.T) {
	f := newFixture(t,
		&corev1.ClusterRole{Metadata: &corev1.ObjectMeta{Name: "cm-writer"}, Rules: []*corev1.PolicyRule{
			{Verbs: []string{"create"}, ApiGroups: []string{""}, Resources: []string{"configmaps"}},
		}},
		&corev1.ClusterRoleBinding{Metadata: &corev1.ObjectMeta{Name: "alice-cm-writer"},
			Subjects: []*corev1.Subject{{Kind: "User", ApiGroup: "rbac.authorization.k8s.io", Name: "alice"}},
			RoleRef:  &corev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cm-writer"}})
	ctx := context.Background()
	if _, err := objects.Mutate(ctx, f.s.env.Store, "", "team", func(ns *corev1.Namespace) error {
		ns.Spec.Finalizers = append(ns.Spec.Finalizers, "example.com/hold")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.s.env.Store = objects.FromKV(&deleteBeforeTxn{KV: f.kv, ns: "team", prefix: objects.ConfigMaps.Prefix("team")})
	obj, _ := proto.Marshal(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "late"}})
	st, _ := f.s.object(ctx, &apiv1.ObjectRequest{Token: aliceToken, Verb: "create", Kind: "configmaps", Namespace: "team", Object: obj})
	want := `configmaps "late" is forbidden: unable to create new content in namespace team because it is being terminated`
	if st.GetCode() != 403 || st.GetMessage() != want {
		t.Fatalf("create racing the DELETE: %v, want 403 %q", st, want)
	}
	if _, err := f.kv.Get(ctx, objects.ConfigMaps.Key("team", "late")); err == nil {
		t.Fatal("the refused ConfigMap was stored")
	}
}

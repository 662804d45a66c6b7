package api

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/services/objects"
)

// TestDeletePropagationPolicy: a DELETE's propagationPolicy (and the
// deprecated orphanDependents) become the garbage collector's finalizers,
// as kube-apiserver's generic store sets them: Orphan and Foreground only
// mark the object, Background deletes it, a ReplicationController (v1)
// is orphaning by default, a marked object's finalizer can be switched by
// a second DELETE, and a ConfigMap (a kind with a message of its own) is
// treated the same.
func TestDeletePropagationPolicy(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	put := func(k objects.Kind, name string) {
		t.Helper()
		obj := k.New()
		md := objects.Meta(obj)
		md.Namespace, md.Name, md.Uid = "team", name, "u-"+name
		if _, err := f.env.Store.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	del := func(kind, name string, policy *string, orphan *bool) (int32, []string, bool) {
		t.Helper()
		req := &apiv1.ObjectRequest{Verb: "delete", Kind: kind, Namespace: "team", Name: name, PropagationPolicy: policy, OrphanDependents: orphan}
		st, _ := f.s.objectAs(ctx, masters, req)
		k, err := objects.KindForResource(kind)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := f.env.Store.GetKind(ctx, k, "team", name)
		if err != nil {
			return st.GetCode(), nil, false
		}
		if obj.GetMetadata().GetDeletionTimestamp() == nil {
			t.Fatalf("%s %s stored and not marked after DELETE: %v", kind, name, st)
		}
		return st.GetCode(), obj.GetMetadata().GetFinalizers(), true
	}
	put(objects.ReplicaSets, "orphaned")
	if code, fins, there := del("replicasets.apps", "orphaned", proto.String("Orphan"), nil); code != 200 || !there || !slices.Equal(fins, []string{"orphan"}) {
		t.Fatalf("Orphan: %d %v %v", code, fins, there)
	}
	if code, fins, there := del("replicasets.apps", "orphaned", proto.String("Foreground"), nil); code != 200 || !there || !slices.Equal(fins, []string{"foregroundDeletion"}) {
		t.Fatalf("Foreground after Orphan: %d %v %v", code, fins, there)
	}
	if code, _, there := del("replicasets.apps", "orphaned", proto.String("Background"), nil); code != 200 || there {
		t.Fatalf("Background after Foreground: %d, still there %v", code, there)
	}
	put(objects.ReplicationControllers, "legacy")
	if code, fins, there := del("replicationcontrollers", "legacy", nil, nil); code != 200 || !there || !slices.Equal(fins, []string{"orphan"}) {
		t.Fatalf("ReplicationController by default: %d %v %v", code, fins, there)
	}
	put(objects.ReplicationControllers, "legacy2")
	if code, _, there := del("replicationcontrollers", "legacy2", nil, proto.Bool(false)); code != 200 || there {
		t.Fatalf("orphanDependents false: %d, still there %v", code, there)
	}
	put(objects.ConfigMaps, "cm")
	if code, fins, there := del("configmaps", "cm", proto.String("Foreground"), nil); code != 200 || !there || !slices.Equal(fins, []string{"foregroundDeletion"}) {
		t.Fatalf("ConfigMap Foreground: %d %v %v", code, fins, there)
	}
	put(objects.ReplicaSets, "plain")
	if code, _, there := del("replicasets.apps", "plain", nil, nil); code != 200 || there {
		t.Fatalf("ReplicaSet by default: %d, still there %v", code, there)
	}
}

package objects_test

import (
	"maps"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// TestDecodeMeta: DecodeMeta yields exactly the metadata's name,
// namespace, uid, deletionTimestamp and the kv's revision — what Decode
// yields for them — and nothing else; a torn value or one without
// metadata is an error.
func TestDecodeMeta(t *testing.T) {
	del := timestamppb.New(timestamppb.Now().AsTime().Truncate(1000))
	full := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "prod", Uid: "u-1", DeletionTimestamp: del,
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"}, ResourceVersion: "3",
			ManagedFields: []*corev1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec:   &corev1.PodSpec{NodeName: "n1", Containers: []*corev1.Container{{Name: "app", Image: "nginx"}}},
		Status: &corev1.PodStatus{Phase: "Running"},
	}
	val, err := proto.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	kv := &raftstore.KV{Key: "/registry/pods/prod/web", Value: val, ModRevision: 42}
	got := &corev1.Pod{}
	if err := objects.DecodeMeta(kv, got); err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "prod", Uid: "u-1", DeletionTimestamp: del, ResourceVersion: "42"}}
	if !proto.Equal(got, want) {
		t.Fatalf("DecodeMeta = %v, want %v", got, want)
	}
	dec := &corev1.Pod{}
	if err := objects.Decode(kv, dec); err != nil {
		t.Fatal(err)
	}
	if m := dec.GetMetadata(); m.Name != got.Metadata.Name || m.Namespace != got.Metadata.Namespace || m.Uid != got.Metadata.Uid ||
		!proto.Equal(m.DeletionTimestamp, got.Metadata.DeletionTimestamp) || objects.Revision(dec) != objects.Revision(got) {
		t.Fatalf("Decode's identity %v differs from DecodeMeta's %v", m, got.Metadata)
	}

	withLabels := &corev1.Pod{}
	if err := objects.DecodeMetaLabels(kv, withLabels); err != nil {
		t.Fatal(err)
	}
	want.Metadata.Labels = map[string]string{"app": "web"}
	if !proto.Equal(withLabels, want) {
		t.Fatalf("DecodeMetaLabels = %v, want %v", withLabels, want)
	}

	sec, _ := proto.Marshal(&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "s", Namespace: "prod", Uid: "u-2"}, Data: map[string][]byte{"k": []byte("v")}})
	gs := &corev1.Secret{}
	if err := objects.DecodeMeta(&raftstore.KV{Key: "k", Value: sec, ModRevision: 7}, gs); err != nil || gs.Metadata.GetUid() != "u-2" || gs.Data != nil {
		t.Fatalf("secret: %v, %v", gs, err)
	}

	for name, v := range map[string][]byte{
		"torn":        val[:len(val)-3],
		"no metadata": mustMarshal(t, &corev1.Pod{Spec: &corev1.PodSpec{NodeName: "n1"}}),
	} {
		if err := objects.DecodeMeta(&raftstore.KV{Key: "k", Value: v}, &corev1.Pod{}); err == nil {
			t.Errorf("%s: no error", name)
		}
		if err := objects.DecodeMetaLabels(&raftstore.KV{Key: "k", Value: v}, &corev1.Pod{}); err == nil {
			t.Errorf("%s: DecodeMetaLabels: no error", name)
		}
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeMetaLabelsAsUnmarshal: the labels DecodeMetaLabels yields are
// proto.Unmarshal's for the same bytes — none, empty keys and values, a
// key repeated on the wire (the last wins) and metadata split in two
// (merged) — and a torn label entry is an error.
func TestDecodeMetaLabelsAsUnmarshal(t *testing.T) {
	entry := func(k, v string, keyFirst bool) []byte {
		var e []byte
		kb := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), k)
		vb := protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), v)
		if keyFirst {
			e = append(append(e, kb...), vb...)
		} else {
			e = append(append(e, vb...), kb...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), e) // ObjectMeta.labels
	}
	meta := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), b) // Pod.metadata
	}
	name := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "p")
	for _, tc := range []struct {
		name string
		val  []byte
	}{
		{"no labels", meta(name)},
		{"two labels", meta(name, entry("a", "1", true), entry("b", "2", false))},
		{"empty key and value", meta(name, entry("", "", true), protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), nil))},
		{"repeated key", meta(name, entry("a", "1", true), entry("a", "2", true))},
		{"split metadata", append(meta(name, entry("a", "1", true)), meta(entry("b", "2", true))...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := &corev1.Pod{}
			if err := proto.Unmarshal(tc.val, want); err != nil {
				t.Fatal(err)
			}
			got := &corev1.Pod{}
			if err := objects.DecodeMetaLabels(&raftstore.KV{Key: "k", Value: tc.val}, got); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.GetMetadata().GetLabels(), want.GetMetadata().GetLabels()) {
				t.Fatalf("labels %v, proto.Unmarshal's %v", got.GetMetadata().GetLabels(), want.GetMetadata().GetLabels())
			}
		})
	}
	torn := entry("app", "web", true)
	torn = torn[:len(torn)-2]
	torn[1] -= 2 // the entry's length, so the metadata is whole and the entry torn
	if err := objects.DecodeMetaLabels(&raftstore.KV{Key: "k", Value: meta(torn)}, &corev1.Pod{}); err == nil {
		t.Error("torn label entry: no error")
	}
}

// TestDecodeMetaOwners: DecodeMetaOwners yields DecodeMetaLabels' fields
// and the owner references, each as proto.Unmarshal reads it (several,
// the controller's flag, metadata split in two merged), and nothing else
// of the object; a torn owner reference is an error.
func TestDecodeMetaOwners(t *testing.T) {
	owners := []*corev1.OwnerReference{
		{ApiVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Uid: "rs-1", Controller: true},
		{ApiVersion: "v1", Kind: "ConfigMap", Name: "cm", Uid: "cm-1"},
	}
	full := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "prod", Uid: "u-1", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"a": "b"}, Finalizers: []string{"f"}, OwnerReferences: owners},
		Spec:   &corev1.PodSpec{NodeName: "n1", Containers: []*corev1.Container{{Name: "app", Image: "nginx"}}},
		Status: &corev1.PodStatus{Phase: "Running"},
	}
	val := mustMarshal(t, full)
	got := &corev1.Pod{}
	if err := objects.DecodeMetaOwners(&raftstore.KV{Key: "k", Value: val, ModRevision: 9}, got); err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "prod", Uid: "u-1", Labels: map[string]string{"app": "web"},
		OwnerReferences: owners, ResourceVersion: "9"}}
	if !proto.Equal(got, want) {
		t.Fatalf("DecodeMetaOwners = %v, want %v", got, want)
	}

	// Metadata split in two on the wire: the references of both halves.
	first := mustMarshal(t, &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", OwnerReferences: owners[:1]}})
	second := mustMarshal(t, &corev1.Pod{Metadata: &corev1.ObjectMeta{OwnerReferences: owners[1:]}})
	split, merged := append(first, second...), &corev1.Pod{}
	if err := proto.Unmarshal(split, merged); err != nil {
		t.Fatal(err)
	}
	got = &corev1.Pod{}
	if err := objects.DecodeMetaOwners(&raftstore.KV{Key: "k", Value: split}, got); err != nil {
		t.Fatal(err)
	}
	if g, w := got.GetMetadata().GetOwnerReferences(), merged.GetMetadata().GetOwnerReferences(); len(g) != 2 || !proto.Equal(g[0], w[0]) || !proto.Equal(g[1], w[1]) {
		t.Fatalf("split metadata: owners %v, proto.Unmarshal's %v", g, w)
	}

	// A torn reference: the metadata's length is whole, the reference's is not.
	ref := protowire.AppendBytes(protowire.AppendTag(nil, 10, protowire.BytesType), // ObjectMeta.owner_references
		protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "v1")[:3])
	torn := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), ref)
	if err := objects.DecodeMetaOwners(&raftstore.KV{Key: "k", Value: torn}, &corev1.Pod{}); err == nil {
		t.Error("torn owner reference: no error")
	}
	// DecodeMetaLabels still skips the references.
	labelsOnly := &corev1.Pod{}
	if err := objects.DecodeMetaLabels(&raftstore.KV{Key: "k", Value: val}, labelsOnly); err != nil || labelsOnly.GetMetadata().OwnerReferences != nil {
		t.Fatalf("DecodeMetaLabels: owners %v, err %v", labelsOnly.GetMetadata().GetOwnerReferences(), err)
	}
}

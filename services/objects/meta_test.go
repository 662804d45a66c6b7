package objects_test

import (
	"testing"

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

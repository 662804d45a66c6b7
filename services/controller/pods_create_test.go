package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// answer is a Requester that answers every request with resp.
type answer struct{ resp []byte }

func (a answer) Request(context.Context, string, []byte) ([]byte, error) { return a.resp, nil }

func storedPod() *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "web-1", Namespace: "default", Uid: "u1", ResourceVersion: "1234",
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"}},
		Spec:   &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}},
		Status: &corev1.PodStatus{Phase: "Pending"},
	}
}

// TestDecodePodMeta: the metadata of an encoded pod decodes as in the
// whole pod's decoding, also when it is written in two parts (merged),
// and a torn encoding is refused.
func TestDecodePodMeta(t *testing.T) {
	whole, err := vt.Marshal(storedPod())
	if err != nil {
		t.Fatal(err)
	}
	first, _ := vt.Marshal(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "old", Uid: "u0", Labels: map[string]string{"tier": "front"}}})
	split := append(first, whole...)
	for name, b := range map[string][]byte{"whole": whole, "split": split} {
		t.Run(name, func(t *testing.T) {
			want := &corev1.Pod{}
			if err := vt.Unmarshal(b, want); err != nil {
				t.Fatal(err)
			}
			got, err := decodePodMeta(b)
			if err != nil || !vt.Equal(got, want.GetMetadata()) {
				t.Errorf("decodePodMeta = %v (%v), want %v", got, err, want.GetMetadata())
			}
		})
	}
	if _, err := decodePodMeta(whole[:len(whole)-3]); err == nil {
		t.Error("decodePodMeta of a torn pod: no error")
	}
}

// TestCreateRevision: CreateRevision returns the revision of the pod
// Create returns, and the same errors for a refused creation.
func TestCreateRevision(t *testing.T) {
	env, _, _ := stagetest.NewEnv("replicaset")
	reply := func(st *corev1.Status, obj *corev1.Pod) []byte {
		resp := &apiv1.Response{Status: st}
		if obj != nil {
			resp.Object, _ = vt.Marshal(obj)
		}
		b, err := vt.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ctx := context.Background()
	p := NewPods(env, answer{reply(stage.Success(201, "pods", "web-1"), storedPod())})
	created, err := p.Create(ctx, storedPod(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rev, err := p.CreateRevision(ctx, storedPod(), time.Now())
	if err != nil || rev != objects.Revision(created) || rev != 1234 {
		t.Errorf("CreateRevision = %d, %v; want %d", rev, err, objects.Revision(created))
	}

	p = NewPods(env, answer{reply(stage.Failure(409, "AlreadyExists", "pods", "web-1", "taken"), nil)})
	if _, err := p.CreateRevision(ctx, storedPod(), time.Now()); !errors.Is(err, ErrNameTaken) {
		t.Errorf("CreateRevision of a taken name: %v, want ErrNameTaken", err)
	}
	p = NewPods(env, answer{reply(stage.Failure(403, "Forbidden", "pods", "web-1", "no"), nil)})
	var se *StatusError
	if _, err := p.CreateRevision(ctx, storedPod(), time.Now()); !errors.As(err, &se) || se.Status.GetCode() != 403 {
		t.Errorf("CreateRevision refused: %v, want a StatusError 403", err)
	}
}

// BenchmarkCreateAnswer: what Create and CreateRevision decode of the
// answer's pod.
func BenchmarkCreateAnswer(b *testing.B) {
	pod := storedPod()
	pod.Spec.Volumes = []*corev1.Volume{{Name: "kube-api-access-x", Projected: &corev1.ProjectedVolumeSource{}}}
	pod.Spec.Containers[0].VolumeMounts = []*corev1.VolumeMount{{Name: "kube-api-access-x", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
	pod.Spec.Containers[0].Resources = &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "100m", "memory": "64Mi"}}
	enc, err := vt.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("pod", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := vt.Unmarshal(enc, &corev1.Pod{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("metadata", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodePodMeta(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

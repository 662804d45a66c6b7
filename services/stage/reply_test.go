package stage_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// TestReplyOnlyToInboxes: Reply answers an inbox and drops (without an
// error) any other subject — an event subject above all, which the stage
// could otherwise publish on with its own permissions.
func TestReplyOnlyToInboxes(t *testing.T) {
	tests := []struct {
		subject string
		ok      bool
	}{
		{"_INBOX.abc", true},
		{"_INBOX.stage-api.x1.7", true},
		{"podflow.pod.PodAuthorized.~.default.x", false},
		{"podflow.store.put", false},
		{"$JS.API.STREAM.DELETE.PODFLOW_EVENTS", false},
		{"_INBOX", false},
		{"_INBOX.", false},
		{"_INBOX..x", false},
		{"_INBOX.>", false},
		{"_INBOX.a.*", false},
		{"_INBOX.a b", false},
		{"x._INBOX.a", false},
	}
	for _, tt := range tests {
		t.Run(tt.subject, func(t *testing.T) {
			err := stage.CheckReplySubject(tt.subject)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, stage.ErrReplySubject)) {
				t.Fatalf("CheckReplySubject(%q) = %v, want ok %v", tt.subject, err, tt.ok)
			}
			env, pub, _ := stagetest.NewEnv("s")
			if err := stage.Reply(env, tt.subject, stage.Success(200, "pods", "p"), nil); err != nil {
				t.Fatalf("Reply: %v", err)
			}
			if got := len(pub.Replies()); (got == 1) != tt.ok {
				t.Errorf("%d replies sent to %q, want ok %v", got, tt.subject, tt.ok)
			}
		})
	}
}

// replyPod is a pod as the persistence stage answers a create with.
func replyPod() *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "web-1", Namespace: "default", Uid: "7d1c6a52-55a4-4a51-9f0e-3c5b1f1c2a10", ResourceVersion: "42",
			Labels: map[string]string{"app": "web", "tier": "front"}, Annotations: map[string]string{"podflow.io/traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
		Spec: &corev1.PodSpec{ServiceAccountName: "default", Containers: []*corev1.Container{{Name: "web", Image: "nginx:1.27",
			Ports: []*corev1.ContainerPort{{ContainerPort: 80, Protocol: "TCP"}}}}},
	}
}

// TestReplyObject: the reply carries the object's kind and an encoding
// that decodes to the object, and an object proto.Marshal refuses (a
// string that is not UTF-8) is refused, nothing sent.
func TestReplyObject(t *testing.T) {
	env, pub, _ := stagetest.NewEnv("s")
	pod := replyPod()
	if err := stage.Reply(env, "_INBOX.a.1", stage.Success(201, "pods", "web-1"), pod); err != nil {
		t.Fatalf("Reply: %v", err)
	}
	replies := pub.Replies()
	if len(replies) != 1 || replies[0].Response == nil {
		t.Fatalf("replies = %v, want one Response", replies)
	}
	resp := replies[0].Response
	got := &corev1.Pod{}
	if err := proto.Unmarshal(resp.GetObject(), got); err != nil {
		t.Fatalf("decode the reply's object: %v", err)
	}
	if resp.GetKind() != "Pod" || !proto.Equal(got, pod) || resp.GetStatus().GetCode() != 201 {
		t.Errorf("reply = kind %q, code %d, object %v; want Pod, 201, %v", resp.GetKind(), resp.GetStatus().GetCode(), got, pod)
	}

	bad := replyPod()
	bad.Metadata.Labels["app"] = "\xff"
	if err := stage.Reply(env, "_INBOX.a.2", stage.Success(201, "pods", "web-1"), bad); err == nil {
		t.Error("Reply of an object holding invalid UTF-8: no error")
	}
	if n := len(pub.Replies()); n != 1 {
		t.Errorf("%d replies after the refused one, want 1", n)
	}
}

// discard is a Publisher that drops what it is given: the benchmark
// measures the encoding, not stagetest's decoding of it.
type discard struct{}

func (discard) Publish(context.Context, *eventsv1.Envelope) error { return nil }
func (discard) Reply(string, []byte) error                        { return nil }

func BenchmarkReplyPod(b *testing.B) {
	env, _, _ := stagetest.NewEnv("s")
	env.Pub = discard{}
	pod := replyPod()
	st := stage.Success(201, "pods", "web-1")
	b.ReportAllocs()
	for b.Loop() {
		if err := stage.Reply(env, "_INBOX.a.1", st, pod); err != nil {
			b.Fatal(err)
		}
	}
}

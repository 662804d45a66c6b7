package api

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/sealed"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// TestSealedTokens: with a SealKey, the request-reply front door puts a
// PodRequested on the stream with its token sealed (never in clear), the
// stage opens sealed tokens, and refuses (401) a token that arrived in
// clear or sealed to another key.
func TestSealedTokens(t *testing.T) {
	f := newFixture(t)
	key, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	f.s.cfg.SealKey = key
	ctx := context.Background()
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web"}, Spec: &corev1.PodSpec{}}

	b, _ := proto.Marshal(&eventsv1.PodRequested{Token: aliceToken, Pod: pod})
	f.s.onCreatePod(ctx, &nats.Msg{Data: b, Reply: bus.UserInbox("alice") + ".x"})
	evs := f.pub.Events()
	if len(evs) != 1 {
		t.Fatalf("published %v, want PodRequested", f.pub.Types())
	}
	raw, _ := proto.Marshal(evs[0])
	if tok := evs[0].GetPodRequested().GetToken(); !sealed.IsSealed(tok) || strings.Contains(string(raw), aliceToken) {
		t.Fatalf("the PodRequested on the stream carries %q: the token in clear", tok)
	}

	other, err := sealed.Generate()
	if err != nil {
		t.Fatal(err)
	}
	sealedOther, _ := sealed.Seal(other.Public, aliceToken)
	sealedOurs, _ := sealed.Seal(key.Public, aliceToken)
	for _, tt := range []struct {
		name     string
		token    string
		wantCode int32
	}{
		{"sealed to the stage's key", sealedOurs, 0},
		{"republished by the front door", evs[0].GetPodRequested().GetToken(), 0},
		{"in clear", aliceToken, 401},
		{"sealed to another key", sealedOther, 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.pub.Reset()
			e := requested(f, tt.token, pod)
			e.GetPodRequested().ReplyTo = bus.UserInbox("alice") + ".req-1" // every token here is alice's
			if err := f.s.Handle(ctx, stagetest.Deliver(f.env, e)); err != nil {
				t.Fatal(err)
			}
			evs := f.pub.Events()
			if len(evs) != 1 {
				t.Fatalf("published %v, want one event", f.pub.Types())
			}
			code := evs[0].GetPodRejected().GetStatus().GetCode()
			if tt.wantCode == 0 && evs[0].GetPodAuthorized().GetUser().GetUsername() != "alice" {
				t.Errorf("published %v, want PodAuthorized for alice", evs[0])
			}
			if tt.wantCode != 0 && code != tt.wantCode {
				t.Errorf("published %v, want PodRejected %d", evs[0], tt.wantCode)
			}
		})
	}
}

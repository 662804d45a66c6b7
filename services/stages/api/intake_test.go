package api

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// TestIntakeBoundedPerIdentity attacks the stream through one identity
// (issue 38, item 5): alice, with valid bus credentials and the right to
// create pods, sends a bounded loop of 2 MB junk to the front door,
// publishes 2 MB junk straight onto the PodRequested subjects, and sends
// valid pod creations of 400 KB each. The junk is refused at the edge
// (400; the server refuses the direct publish), her valid requests past
// her share of the stream get 429, the stream stays below its high-water
// mark and holds none of the junk, nothing is dead-lettered, and another
// user's pod is still accepted.
func TestIntakeBoundedPerIdentity(t *testing.T) {
	const maxBytes = 32 << 20
	f, conn, srv := busFixtureServer(t, maxBytes)
	alice := bustest.ConnectUser(t, srv, "alice", "alice")
	builder := bustest.ConnectUser(t, srv, "system:serviceaccount:team:builder", "builder")
	junk := make([]byte, 2<<20)
	if _, err := rand.Read(junk); err != nil {
		t.Fatal(err)
	}
	// What the api stage lets into the stream, seen by the admin: an
	// accepted pod creation is answered by a later stage (none runs here),
	// so its positive signal is its PodRequested on the stream's subject.
	admitted, err := conn.NATS().SubscribeSync("podflow.pod.PodRequested.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	// request sends a pod creation and returns the api stage's answer, or
	// nil once its pod's PodRequested is on the stream, whichever comes
	// first; bustest.Timeout bounds a starved run, not the test's pace.
	request := func(c *bus.Conn, data []byte) *corev1.Status {
		t.Helper()
		inbox := c.NATS().NewInbox()
		answer, err := c.NATS().SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = answer.Unsubscribe() }()
		if err := c.NATS().PublishRequest(pipeline.CreatePodSubject, inbox, data); err != nil {
			t.Fatal(err)
		}
		want := &eventsv1.PodRequested{}
		_ = proto.Unmarshal(data, want) // junk: no pod name, never admitted
		deadline := time.Now().Add(bustest.Timeout)
		for time.Now().Before(deadline) {
			if m, err := answer.NextMsg(10 * time.Millisecond); err == nil {
				resp := &apiv1.Response{}
				if err := proto.Unmarshal(m.Data, resp); err != nil {
					t.Fatal(err)
				}
				return resp.GetStatus()
			} else if !errors.Is(err, nats.ErrTimeout) {
				t.Fatal(err)
			}
			for {
				m, err := admitted.NextMsg(time.Millisecond)
				if errors.Is(err, nats.ErrTimeout) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				env := &eventsv1.Envelope{}
				if err := proto.Unmarshal(m.Data, env); err != nil {
					t.Fatalf("%s on the stream: %v", m.Subject, err)
				}
				if env.GetPodName() != want.GetPod().GetMetadata().GetName() || want.GetPod() == nil {
					t.Fatalf("the stream took %s %s/%s, not the pod just requested", m.Subject, env.GetNamespace(), env.GetPodName())
				}
				return nil
			}
		}
		t.Fatalf("no answer to the pod creation and nothing on the stream after %s", bustest.Timeout)
		return nil
	}
	big := func(i int) []byte {
		b, _ := proto.Marshal(&eventsv1.PodRequested{Token: aliceToken, Pod: &corev1.Pod{
			Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "big-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26),
				Annotations: map[string]string{"junk": strings.Repeat("x", 400<<10)}}}})
		return b
	}
	accepted, refused := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 100 && time.Now().Before(deadline); i++ {
		if st := request(alice, junk); st.GetCode() != 400 {
			t.Fatalf("junk %d: %v, want 400", i, st)
		}
		if err := alice.NATS().Publish("podflow.pod.PodRequested.team.junk", junk); err != nil {
			t.Fatal(err)
		}
		switch st := request(alice, big(i)); {
		case st == nil:
			accepted++ // into the stream; no later stage runs here to answer
		case st.GetCode() == 429 && strings.Contains(st.GetMessage(), "UserEventsShare"):
			refused++
		default:
			t.Fatalf("pod %d: %v, want accepted or 429 past alice's share", i, st)
		}
	}
	if refused == 0 {
		t.Fatalf("alice had %d pods of 400 KB accepted and none refused", accepted)
	}
	msgs, used := streamState(t, conn)
	if float64(used) >= f.s.events.highWater*maxBytes || float64(used) > DefaultUserEventsShare*maxBytes {
		t.Fatalf("alice's requests hold %d bytes of the stream's %d", used, maxBytes)
	}
	if msgs != uint64(accepted) {
		t.Fatalf("the stream holds %d messages, want alice's %d accepted pods and no junk", msgs, accepted)
	}
	if err := alice.NATS().LastError(); err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("the direct publish of junk was not refused by the server: %v", err)
	}
	// Another user's pod is still accepted.
	b, _ := proto.Marshal(&eventsv1.PodRequested{Token: saToken, Pod: &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "other"}}})
	if st := request(builder, b); st != nil {
		t.Fatalf("another user's pod: %v, want it accepted", st)
	}
	if msgs, _ := streamState(t, conn); msgs != uint64(accepted)+1 {
		t.Fatalf("the stream holds %d messages, want %d", msgs, accepted+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	dlq, err := conn.JetStream().Stream(ctx, bus.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := dlq.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("the dead letters hold %v messages (%v), want none", info.State.Msgs, err)
	}
}

// TestRepliesOnlyToTheRequestersInbox (issue 38, item 3): bob, with his
// own valid bus credentials and token, asks the front door to answer into
// alice's inbox, for a pod creation and for an object request: the api
// stage answers nowhere, and nothing reaches alice's inbox; answers into
// bob's own inbox and alice's requests into hers are served.
func TestRepliesOnlyToTheRequestersInbox(t *testing.T) {
	f, conn, srv := busFixtureServer(t, 1<<20)
	stageServe(t, f)
	alice := bustest.ConnectUser(t, srv, "alice", "alice")
	bob := bustest.ConnectUser(t, srv, "bob", "bob")
	// What reaches alice's inboxes, seen by the admin.
	seen, err := conn.NATS().SubscribeSync(bus.UserInbox("alice") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	pod, _ := proto.Marshal(&eventsv1.PodRequested{Token: bobToken, Pod: &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web"}}})
	obj, _ := proto.Marshal(&apiv1.ObjectRequest{Token: bobToken, Verb: "delete", Kind: "configmaps", Namespace: "team", Name: "x"})
	for _, r := range []struct {
		subject string
		data    []byte
	}{{pipeline.CreatePodSubject, pod}, {pipeline.ObjectSubject, obj}} {
		if err := bob.NATS().PublishRequest(r.subject, bus.UserInbox("alice")+".stolen", r.data); err != nil {
			t.Fatal(err)
		}
		// Bob's own inbox is answered (403: bob may do neither); served in
		// order by the same workers, the stolen one was handled first.
		m, err := bob.NATS().Request(r.subject, r.data, 5*time.Second)
		if err != nil {
			t.Fatalf("bob's own request on %s: %v", r.subject, err)
		}
		resp := &apiv1.Response{}
		if err := proto.Unmarshal(m.Data, resp); err != nil || resp.GetStatus().GetCode() != 403 {
			t.Fatalf("bob's answer on %s: %v %v, want 403", r.subject, resp.GetStatus(), err)
		}
	}
	// Alice's own object request is answered into her inbox.
	mine, _ := proto.Marshal(&apiv1.ObjectRequest{Token: aliceToken, Verb: "delete", Kind: "configmaps", Namespace: "team", Name: "x"})
	if _, err := alice.NATS().Request(pipeline.ObjectSubject, mine, 5*time.Second); err != nil {
		t.Fatalf("alice's own request: %v", err)
	}
	for {
		m, err := seen.NextMsg(200 * time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(m.Subject, ".stolen") {
			t.Fatalf("the api stage answered bob's request into alice's inbox %s", m.Subject)
		}
	}
}

// stageServe serves pipeline.ObjectSubject too (busFixture serves pod
// creations only).
func stageServe(t *testing.T, f *fixture) {
	t.Helper()
	stagetest.Start(t, func(ctx context.Context, g *errgroup.Group) error {
		return f.s.serve(ctx, g, pipeline.ObjectSubject, f.s.onObject)
	})
}

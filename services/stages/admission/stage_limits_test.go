package admission

import (
	"context"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// laggingKV is a store whose watches deliver nothing until released: the
// informers' caches stay where their first list left them, as a cache a
// moment behind the store does.
type laggingKV struct {
	*objectstest.KV
	release chan struct{}
}

func (k laggingKV) Watch(ctx context.Context, prefix string, fromRev int64, opts ...raftstore.WatchOption) (objects.Watch, error) {
	w, err := k.KV.Watch(ctx, prefix, fromRev, opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan raftstore.WatchEvent)
	go func() {
		defer close(out)
		select {
		case <-k.release:
		case <-ctx.Done():
			return
		}
		for ev := range w.Events() {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return laggingWatch{Watch: w, events: out}, nil
}

type laggingWatch struct {
	objects.Watch
	events chan raftstore.WatchEvent
}

func (w laggingWatch) Events() <-chan raftstore.WatchEvent { return w.events }

// TestLimitRangeFromTheStore: a LimitRange the informers have not seen
// yet applies to the next pod: admission reads LimitRanges from the store
// when it admits, not from a cache.
func TestLimitRangeFromTheStore(t *testing.T) {
	env, pub, base := stagetest.NewEnv("admission")
	kv := laggingKV{KV: base, release: make(chan struct{})}
	defer close(kv.release)
	env.Store = objects.FromKV(kv)
	ctx := context.Background()
	ns := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: "team", Uid: "ns-team"}, Status: &corev1.NamespaceStatus{Phase: "Active"}}
	if _, err := env.Store.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	s, err := NewStage(env, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	stagetest.Start(t, s.Start)
	lr := &corev1.LimitRange{Metadata: &corev1.ObjectMeta{Name: "defaults", Namespace: "team"}, Spec: &corev1.LimitRangeSpec{
		Limits: []*corev1.LimitRangeItem{{Type: "Container", Default: map[string]string{"cpu": "300m"}}}}}
	if _, err := env.Store.Create(ctx, lr); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "team", Uid: "u"},
		Spec: &corev1.PodSpec{ImagePullSecrets: []*corev1.LocalObjectReference{{Name: "x"}}, Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}}}
	d := stagetest.Deliver(env, &eventsv1.Envelope{RequestId: "r", Namespace: "team", PodName: "p", PodUid: "u",
		Payload: &eventsv1.Envelope_PodAuthorized{PodAuthorized: &eventsv1.PodAuthorized{Pod: pod}}})
	if err := s.Handle(ctx, d); err != nil {
		t.Fatal(err)
	}
	evs := pub.Events()
	if len(evs) != 1 || evs[0].GetPodAdmitted() == nil {
		t.Fatalf("published %v, want PodAdmitted", pub.Types())
	}
	got := evs[0].GetPodAdmitted().GetPod().GetSpec().GetContainers()[0].GetResources().GetLimits()["cpu"]
	if got != "300m" {
		t.Errorf("the pod's cpu limit is %q, want the LimitRange's default 300m", got)
	}
}

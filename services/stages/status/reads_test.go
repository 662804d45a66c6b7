package status

import (
	"context"
	"sync"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// laggingKV is a store whose first read of key after arm is answered as
// a replica behind the leader answers a stale read: with what the key held
// when lag was called (not found when it held nothing).
type laggingKV struct {
	objects.KV
	mu   sync.Mutex
	key  string
	old  *raftstore.KV
	miss error // the answer when the key held nothing
	used bool
}

func (l *laggingKV) lag(t *testing.T, key string) {
	t.Helper()
	l.key = key
	l.old, l.miss = l.KV.Get(context.Background(), key)
	l.used = true
}

func (l *laggingKV) arm() {
	l.mu.Lock()
	l.used = false
	l.mu.Unlock()
}

func (l *laggingKV) Get(ctx context.Context, key string, opts ...raftstore.ReadOption) (*raftstore.KV, error) {
	l.mu.Lock()
	first := key == l.key && !l.used
	if first {
		l.used = true
	}
	l.mu.Unlock()
	if first {
		return l.old, l.miss
	}
	return l.KV.Get(ctx, key, opts...)
}

// reportFixture: a status stage over a fake store whose first read of the
// pod default/p is lagging, and whose reads are counted by key.
func reportFixture(t *testing.T) (*Stage, stage.Env, *laggingKV, map[string]int) {
	t.Helper()
	env, _, kv := stagetest.NewEnv("status")
	reads := map[string]int{}
	var mu sync.Mutex
	kv.Hook(func(method, key string) error {
		if method == "Get" || method == "List" {
			mu.Lock()
			reads[key]++
			mu.Unlock()
		}
		return nil
	})
	lkv := &laggingKV{KV: kv}
	env.Store = objects.FromKV(lkv)
	s, err := NewStage(env, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return s, env, lkv, reads
}

func reportPod() *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "default", Uid: "uid-p"},
		Spec:     &corev1.PodSpec{NodeName: "n1"},
		Status:   &corev1.PodStatus{Phase: "Pending"},
	}
}

func reportEvent(seq int64, status *corev1.PodStatus, reasons ...string) *eventsv1.Envelope {
	rep := &eventsv1.PodStatusReport{Seq: seq, Status: status}
	for _, r := range reasons {
		rep.Events = append(rep.Events, &eventsv1.EventRecord{Type: "Normal", Reason: r, Message: r + " it"})
	}
	return &eventsv1.Envelope{
		Id: "report-" + string(rune('a'+seq)), Namespace: "default", PodName: "p", PodUid: "uid-p", NodeName: "n1",
		Stage: "nodeagent", Replica: "n1", Payload: &eventsv1.Envelope_PodStatusReport{PodStatusReport: rep},
	}
}

func eventCounts(t *testing.T, env stage.Env) map[string]int32 {
	t.Helper()
	evs, _, err := objects.List[*corev1.Event](context.Background(), env.Store, "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, ev := range evs {
		out[ev.GetReason()] = ev.GetCount()
	}
	return out
}

// TestReportReadsThePodOnly: the first report of a pod reads the pod once
// and no Event; its Events are recorded once each, and the same report
// delivered again changes nothing. A later report with an occurrence
// already recorded counts it on top (count 2).
func TestReportReadsThePodOnly(t *testing.T) {
	s, env, _, reads := reportFixture(t)
	ctx := context.Background()
	if _, err := env.Store.Create(ctx, reportPod()); err != nil {
		t.Fatal(err)
	}
	for k := range reads {
		delete(reads, k)
	}
	first := reportEvent(1, &corev1.PodStatus{Phase: "Running"}, "Pulled", "Created", "Started")
	if err := s.Handle(ctx, stagetest.Deliver(env, first)); err != nil {
		t.Fatal(err)
	}
	podKey := objects.Pods.Key("default", "p")
	if len(reads) != 1 || reads[podKey] != 1 {
		t.Errorf("reads %v, want the pod's key once and nothing else", reads)
	}
	want := map[string]int32{"Pulled": 1, "Created": 1, "Started": 1}
	pod, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "p")
	if err != nil || pod.GetStatus().GetPhase() != "Running" {
		t.Fatalf("pod status %v (%v), want the report applied", pod.GetStatus(), err)
	}
	if got := eventCounts(t, env); !equalCounts(got, want) {
		t.Fatalf("Events %v, want %v", got, want)
	}

	// Redelivered: the same state, the pod not written again.
	if err := s.Handle(ctx, stagetest.Deliver(env, first)); err != nil {
		t.Fatal(err)
	}
	again, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "p")
	if err != nil || objects.Revision(again) != objects.Revision(pod) {
		t.Errorf("pod at revision %d after a redelivery, was %d (%v)", objects.Revision(again), objects.Revision(pod), err)
	}
	if got := eventCounts(t, env); !equalCounts(got, want) {
		t.Errorf("Events %v after a redelivery, want %v", got, want)
	}

	// Started again (another report): counted on the stored Event.
	if err := s.Handle(ctx, stagetest.Deliver(env, reportEvent(2, &corev1.PodStatus{Phase: "Running"}, "Started"))); err != nil {
		t.Fatal(err)
	}
	want["Started"] = 2
	if got := eventCounts(t, env); !equalCounts(got, want) {
		t.Errorf("Events %v after a second Started, want %v", got, want)
	}
}

// applied arms the lagging read, handles a Running report and checks
// that the stored pod is Running: the report was neither dropped nor
// refused on the lagging copy.
func applied(t *testing.T, s *Stage, env stage.Env, lkv *laggingKV) {
	t.Helper()
	ctx := context.Background()
	lkv.arm()
	if err := s.Handle(ctx, stagetest.Deliver(env, reportEvent(1, &corev1.PodStatus{Phase: "Running"}, "Started"))); err != nil {
		t.Fatalf("Handle = %v on a lagging copy", err)
	}
	pod, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "p")
	if err != nil || pod.GetStatus().GetPhase() != "Running" {
		t.Errorf("pod status %v (%v): the report was not applied", pod.GetStatus(), err)
	}
}

func equalCounts(a, b map[string]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestReportOnALaggingRead: the pod's first read may be a stale copy. A
// copy that does not show the pod yet (or shows a previous pod of its
// name), or not yet bound to the reporting
// node, is no reason to drop or refuse the report; a copy of a pod gone
// since is no reason to record its Events; a copy older than the stored
// pod is not written over it.
func TestReportOnALaggingRead(t *testing.T) {
	podKey := objects.Pods.Key("default", "p")
	ctx := context.Background()
	t.Run("not stored yet", func(t *testing.T) {
		s, env, lkv, _ := reportFixture(t)
		lkv.lag(t, podKey)
		if _, err := env.Store.Create(ctx, reportPod()); err != nil {
			t.Fatal(err)
		}
		applied(t, s, env, lkv)
	})
	t.Run("a previous pod of the name", func(t *testing.T) {
		s, env, lkv, _ := reportFixture(t)
		old := reportPod()
		old.Metadata.Uid = "uid-old"
		if _, err := env.Store.Create(ctx, old); err != nil {
			t.Fatal(err)
		}
		lkv.lag(t, podKey)
		if _, err := env.Store.Delete(ctx, objects.Pods, "default", "p", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Store.Create(ctx, reportPod()); err != nil {
			t.Fatal(err)
		}
		applied(t, s, env, lkv)
	})
	t.Run("not bound yet", func(t *testing.T) {
		s, env, lkv, _ := reportFixture(t)
		unbound := reportPod()
		unbound.Spec.NodeName = ""
		if _, err := env.Store.Create(ctx, unbound); err != nil {
			t.Fatal(err)
		}
		lkv.lag(t, podKey)
		if _, err := objects.Mutate(ctx, env.Store, "default", "p", func(p *corev1.Pod) error { p.Spec.NodeName = "n1"; return nil }); err != nil {
			t.Fatal(err)
		}
		applied(t, s, env, lkv)
	})
	t.Run("gone since", func(t *testing.T) {
		s, env, lkv, _ := reportFixture(t)
		if _, err := env.Store.Create(ctx, reportPod()); err != nil {
			t.Fatal(err)
		}
		lkv.lag(t, podKey)
		if _, err := env.Store.Delete(ctx, objects.Pods, "default", "p", 0); err != nil {
			t.Fatal(err)
		}
		// Events only: the report leaves the status as it is.
		lkv.arm()
		if err := s.Handle(ctx, stagetest.Deliver(env, reportEvent(1, nil, "Killing"))); err != nil {
			t.Fatal(err)
		}
		if got := eventCounts(t, env); len(got) != 0 {
			t.Errorf("Events %v recorded for a pod no longer stored", got)
		}
	})
	t.Run("older than stored", func(t *testing.T) {
		s, env, lkv, _ := reportFixture(t)
		if _, err := env.Store.Create(ctx, reportPod()); err != nil {
			t.Fatal(err)
		}
		lkv.lag(t, podKey)
		if _, err := objects.Mutate(ctx, env.Store, "default", "p", func(p *corev1.Pod) error {
			p.Metadata.Labels = map[string]string{"app": "web"}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		lkv.arm()
		if err := s.Handle(ctx, stagetest.Deliver(env, reportEvent(1, &corev1.PodStatus{Phase: "Running"}))); err != nil {
			t.Fatal(err)
		}
		pod, err := objects.Get[*corev1.Pod](ctx, env.Store, "default", "p")
		if err != nil || pod.GetStatus().GetPhase() != "Running" || pod.GetMetadata().GetLabels()["app"] != "web" {
			t.Errorf("pod %v (%v): want the report applied on the stored pod, its label kept", pod, err)
		}
	})
}

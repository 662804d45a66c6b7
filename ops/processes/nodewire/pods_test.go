package nodewire

import (
	"context"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// boundAgent records the pods handed to HandlePodBound.
type boundAgent struct{ bound chan *corev1.Pod }

func (a boundAgent) HandlePodBound(_ context.Context, pod *corev1.Pod) error {
	a.bound <- pod
	return nil
}

func (boundAgent) HandlePodDelete(context.Context, *corev1.Pod, time.Duration) error { return nil }

// TestWatchPodsHandsEphemeralContainersOver: adding an ephemeral
// container to a pod of the node reaches the agent at once; the same
// write to another node's pod, to a pod being deleted, or any other
// change of the node's pod does not.
func TestWatchPodsHandsEphemeralContainersOver(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := boundAgent{bound: make(chan *corev1.Pod, 16)}
	pod := func(name, node string) *corev1.Pod {
		p := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: "uid-" + name},
			Spec: &corev1.PodSpec{NodeName: node, Containers: []*corev1.Container{{Name: "app", Image: "nginx"}}}}
		if _, err := st.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mine, theirs, leaving := pod("mine", "node-a"), pod("theirs", "node-b"), pod("leaving", "node-a")
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	w, err := NewPodWatch(st, a, "node-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("WatchPods = %v", err)
		}
	}()
	update := func(p *corev1.Pod, change func(*corev1.Pod)) {
		t.Helper()
		cur, err := objects.Get[*corev1.Pod](ctx, st, "default", p.Metadata.Name)
		if err != nil {
			t.Fatal(err)
		}
		change(cur)
		if _, err := st.Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
	}
	debug := func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, &corev1.EphemeralContainer{Name: "debugger", Image: "busybox"})
	}
	if err := w.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	update(theirs, debug)
	update(leaving, func(p *corev1.Pod) { p.Metadata.DeletionTimestamp = timestamppb.Now() })
	update(leaving, debug)
	update(mine, func(p *corev1.Pod) { p.Metadata.Labels = map[string]string{"probe": "2"} })
	update(mine, debug)
	select {
	case got := <-a.bound:
		// The whole pod, as stored: not the watch's trimmed copy.
		if got.GetMetadata().GetName() != "mine" || len(got.GetSpec().GetEphemeralContainers()) != 1 ||
			len(got.GetSpec().GetContainers()) != 1 || got.GetSpec().GetContainers()[0].GetImage() != "nginx" || got.GetMetadata().GetLabels()["probe"] != "2" {
			t.Errorf("handed over %v, want the whole of mine with its ephemeral container", got)
		}
	case <-ctx.Done():
		t.Fatal("the ephemeral container never reached the agent")
	}
	select {
	case got := <-a.bound:
		t.Errorf("also handed over %v", got)
	default:
	}
}

// TestWatchDecoderSharesNodeSpecs: the watch's cache keeps of a pod what
// a full decode gives of its identity, deletionTimestamp, node and
// ephemeral containers, and nothing else; the pods of one node without
// ephemeral containers share one spec.
func TestWatchDecoderSharesNodeSpecs(t *testing.T) {
	decode := func(d *watchDecoder, p *corev1.Pod, rev int64) *corev1.Pod {
		t.Helper()
		v, err := vt.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		kv := &raftstore.KV{Key: "/pods/bench/" + p.GetMetadata().GetName(), Value: v, ModRevision: rev}
		out := &corev1.Pod{}
		if err := d.decode(kv, out); err != nil {
			t.Fatal(err)
		}
		full := &corev1.Pod{}
		if err := objects.Decode(kv, full); err != nil {
			t.Fatal(err)
		}
		md := full.GetMetadata()
		want := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: md.GetName(), Namespace: md.GetNamespace(), Uid: md.GetUid(),
			ResourceVersion: md.GetResourceVersion(), DeletionTimestamp: md.GetDeletionTimestamp()},
			Spec: &corev1.PodSpec{NodeName: full.GetSpec().GetNodeName(), EphemeralContainers: full.GetSpec().GetEphemeralContainers()}}
		if !vt.Equal(out, want) {
			t.Fatalf("decoded\n%v\nwant\n%v", out, want)
		}
		return out
	}
	pod := func(i int, node string, ephs ...*corev1.EphemeralContainer) *corev1.Pod {
		p := benchPod(i)
		p.Spec.NodeName, p.Spec.EphemeralContainers = node, ephs
		return p
	}
	d := &watchDecoder{}
	a, b, c := decode(d, pod(1, "n1"), 7), decode(d, pod(2, "n1"), 8), decode(d, pod(3, "n2"), 9)
	e := decode(d, pod(4, "n1", &corev1.EphemeralContainer{Name: "debug", Image: "busybox", Command: []string{"sh"}}), 10)
	if a.Spec != b.Spec {
		t.Error("two pods of one node hold a spec each")
	}
	if c.Spec == a.Spec || e.Spec == a.Spec {
		t.Error("a pod of another node, or with ephemeral containers, shares the node's spec")
	}
	deleting := pod(5, "n1")
	deleting.Metadata.DeletionTimestamp = &timestamppb.Timestamp{Seconds: 1_800_000_100, Nanos: 5}
	decode(d, deleting, 11)
	pending := pod(6, "")
	pending.Status = nil
	decode(d, pending, 12)
	decode(d, &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "bare"}}, 13)
	// Bytes a full decode refuses are refused.
	bad, _ := vt.Marshal(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "x"}})
	for _, v := range [][]byte{bad[:len(bad)-1], {}} {
		if err := d.decode(&raftstore.KV{Key: "/pods/bench/x", Value: v}, &corev1.Pod{}); err == nil {
			t.Errorf("%q decoded", v)
		}
	}
}

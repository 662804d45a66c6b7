package nodewire

import (
	"context"
	"strconv"
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

// TestWatchDecoderSharesNodeSpecs: the watch's cache keeps of a pod its
// identity, deletionTimestamp, node and ephemeral containers; the pods of
// one node without ephemeral containers share one spec.
func TestWatchDecoderSharesNodeSpecs(t *testing.T) {
	decode := func(d *watchDecoder, i int, node string, ephs ...*corev1.EphemeralContainer) *corev1.Pod {
		t.Helper()
		p := benchPod(i)
		p.Spec.NodeName, p.Spec.EphemeralContainers = node, ephs
		p.Metadata.DeletionTimestamp = timestamppb.New(time.Unix(1_800_000_100, 0))
		v, err := vt.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		out := &corev1.Pod{}
		if err := d.decode(&raftstore.KV{Key: "/pods/bench/" + p.Metadata.Name, Value: v, ModRevision: int64(7 + i)}, out); err != nil {
			t.Fatal(err)
		}
		md := out.GetMetadata()
		if md.GetName() != p.Metadata.Name || md.GetNamespace() != "bench" || md.GetUid() != p.Metadata.Uid ||
			md.GetResourceVersion() != strconv.Itoa(7+i) || !md.GetDeletionTimestamp().AsTime().Equal(time.Unix(1_800_000_100, 0)) {
			t.Fatalf("metadata %v", md)
		}
		if out.GetSpec().GetNodeName() != node || len(out.GetSpec().GetEphemeralContainers()) != len(ephs) || out.GetStatus() != nil {
			t.Fatalf("spec %v status %v", out.GetSpec(), out.GetStatus())
		}
		if md.GetLabels() != nil || out.GetSpec().GetContainers() != nil {
			t.Fatalf("kept more than it compares: %v", out)
		}
		return out
	}
	d := &watchDecoder{}
	a, b, c := decode(d, 1, "n1"), decode(d, 2, "n1"), decode(d, 3, "n2")
	e := decode(d, 4, "n1", &corev1.EphemeralContainer{Name: "debug", Image: "busybox"})
	if a.Spec != b.Spec {
		t.Error("two pods of one node hold a spec each")
	}
	if c.Spec == a.Spec || e.Spec == a.Spec {
		t.Error("a pod of another node, or with ephemeral containers, shares the node's spec")
	}
}

package roles

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/nodelogs"
)

// logRuntime is the simulated runtime with a log of one line per
// container instance the agent names; it knows no other (as the Linux
// runtime, after a pod is gone).
type logRuntime struct{ *sim.Runtime }

func (logRuntime) ReadLog(req nodeagent.LogRequest, _ int) (nodeagent.LogChunk, error) {
	if req.ID == "" {
		return nodeagent.LogChunk{}, nodeagent.Errorf(nodeagent.CodeNotFound, "pod %q does not exist", req.Pod)
	}
	if req.Offset > 0 {
		return nodeagent.LogChunk{Container: req.Container, Offset: req.Offset}, nil
	}
	line := "2026-01-01T00:00:00Z stdout F instance " + string(req.ID) + "\n"
	return nodeagent.LogChunk{Container: req.Container, Data: []byte(line), Offset: int64(len(line))}, nil
}

// TestReadLogRefusals: the node's log server answers through its agent:
// the running instance's log; kubelet's BadRequest for a container that
// cannot start, with its words, and NotFound for a pod the node does not
// know, each carried to the api stage as a nodelogs.Error of that reason.
func TestReadLogRefusals(t *testing.T) {
	rt, err := sim.New(sim.DefaultConfig("10.244.9.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	cfg := nodeagent.DefaultConfig("n1", "10.244.9.0/24")
	cfg.ImagePullBackOff = nodeagent.Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	store := nodeagenttest.NewStore()
	a, err := nodeagent.New(cfg, logRuntime{rt}, store, nodeagenttest.NewPublisher())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name, Annotations: annotations},
			Spec: &corev1.PodSpec{NodeName: "n1", Containers: []*corev1.Container{{Name: "c", Image: "busybox:1"}}}}
	}
	for _, p := range []*corev1.Pod{pod("runs", nil), pod("nopull", map[string]string{sim.AnnotationImagePull: sim.Fail})} {
		store.PutPod(p)
		if err := a.HandlePodBound(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var rep nodelogs.Reply
	for rep.Data == nil && ctx.Err() == nil {
		st, _ := a.PodStatus("uid-runs")
		if cs := st.GetContainerStatuses(); len(cs) == 1 && cs[0].GetState().GetRunning() != nil {
			if rep, err = readLog(a, nodelogs.Request{Namespace: "default", Pod: "runs"}, 1024); err != nil {
				t.Fatal(err)
			}
			if want := "instance " + cs[0].GetContainerId(); string(nodelogs.Messages(rep.Data)) != want+"\n" {
				t.Fatalf("log %q, want the running instance's (%s)", rep.Data, want)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	var refusal *nodelogs.Error
	for ctx.Err() == nil {
		_, err = readLog(a, nodelogs.Request{Namespace: "default", Pod: "nopull", Container: "c"}, 1024)
		if errors.As(err, &refusal) && refusal.Message == `container "c" in pod "nopull" is waiting to start: image can't be pulled` {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if refusal == nil || refusal.Reason != nodelogs.ReasonBadRequest {
		t.Fatalf("a container that cannot pull: %#v", err)
	}
	_, err = readLog(a, nodelogs.Request{Namespace: "default", Pod: "elsewhere", Container: "c"}, 1024)
	if !errors.As(err, &refusal) || refusal.Reason != nodelogs.ReasonNotFound {
		t.Fatalf("a pod the node does not know: %#v", err)
	}
}

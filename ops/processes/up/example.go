package up

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/trace"
	"github.com/podflow/podflow/proto/corev1"
)

// RunExample applies the seed's pod and Service and prints the pod's way
// through the stages until it is Ready and in its Service's endpoints.
func RunExample(ctx context.Context, sess *client.Session, dir string, out io.Writer) error {
	files := []string{filepath.Join(dir, "nginx-service.yaml"), filepath.Join(dir, "nginx-pod.yaml")}
	objs, err := client.ReadManifest(files[1])
	if err != nil {
		return err
	}
	pod, ok := objs[0].Message.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("%s: want a Pod, found a %s", files[1], objs[0].Kind)
	}
	name := pod.GetMetadata().GetName()
	fmt.Fprintf(out, "\nexample: podflow apply -f %s -f %s\n", files[0], files[1])
	follow, err := followPod(ctx, sess, "default", name, out)
	if err != nil {
		return err
	}
	if err := sess.ApplyFiles(ctx, files, sess.Config.Token, "", out, out); err != nil {
		follow.stop()
		return err
	}
	return follow.wait(ctx, 60*time.Second)
}

type follower struct {
	done chan struct{}
	cc   jetstream.ConsumeContext
}

func (f *follower) stop() { f.cc.Stop() }

func (f *follower) wait(ctx context.Context, timeout time.Duration) error {
	defer f.stop()
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("the pod did not become Ready within %s: see `podflow describe pod`", timeout)
	}
}

// followPod prints every event of the pod from the stream as it arrives,
// and reports done once the pod joined its Service's endpoints (or was
// rejected).
func followPod(ctx context.Context, sess *client.Session, ns, name string, out io.Writer) (*follower, error) {
	cons, err := sess.Bus.JetStream().OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.PodFilter(ns, name)},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, err
	}
	f := &follower{done: make(chan struct{})}
	start := time.Now()
	closed := false
	f.cc, err = cons.Consume(func(m jetstream.Msg) {
		envs, err := bus.DecodeEvents(m.Data())
		if err != nil {
			return
		}
		for _, env := range envs {
			fmt.Fprintf(out, "  %6s  %-12s %-22s %s\n", time.Since(start).Round(time.Millisecond), env.GetStage(), env.Type(), trace.Detail(env))
		}
		if closed {
			return
		}
		if u := envs[0].GetEndpointsUpdated(); (u != nil && u.GetAdded()) || envs[0].GetPodRejected() != nil {
			closed = true
			close(f.done)
		}
	})
	return f, err
}

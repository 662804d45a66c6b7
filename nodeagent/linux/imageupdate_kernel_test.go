package linux_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/nodeagent/linux/container/containertest"
	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// A pod update that changes one container's image, on the kernel: that
// container is killed (Killing "Container main definition changed, will
// be restarted"), the new image is pulled and the container started from
// it (restartCount 1); the other container keeps running, never
// restarted.
func TestImageUpdateOnTheKernel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	img, err := imagebuild.Busybox(context.Background(), containertest.Busybox)
	if err != nil {
		t.Fatal(err)
	}
	const newImage = "podflow/busybox:2"
	e.reg.Push(t, newImage, img)
	a, store, pub := runAgent(t, e)
	pd := newPod(e.cfg.NodeName, "update", "sleep", "3600")
	pd.Spec.Containers = append(pd.Spec.Containers, &corev1.Container{Name: "side", Image: busyboxImage,
		ImagePullPolicy: "IfNotPresent", Command: []string{"sleep", "3600"}})
	ctx, uid, wait := bindPod(t, a, store, pub, pd)
	wait("PodReady", func(envs []*eventsv1.Envelope) bool { return count(envs, "PodReady") > 0 })

	up := proto.Clone(pd).(*corev1.Pod)
	up.Spec.Containers[0].Image = newImage
	store.PutPod(up)
	if err := a.HandlePodBound(ctx, up); err != nil {
		t.Fatal(err)
	}
	restarted := func(envs []*eventsv1.Envelope, name string) bool {
		for _, env := range envs {
			if s := env.GetContainerStarted(); s.GetContainer() == name && s.GetRestartCount() == 1 {
				return true
			}
		}
		return false
	}
	wait("main restarted", func(envs []*eventsv1.Envelope) bool { return restarted(envs, "main") })
	wait("a report of main running "+newImage, func(envs []*eventsv1.Envelope) bool {
		for _, env := range envs {
			for _, cs := range env.GetPodStatusReport().GetStatus().GetContainerStatuses() {
				if cs.GetName() == "main" && cs.GetImage() == newImage && cs.GetState().GetRunning() != nil && cs.GetRestartCount() == 1 {
					return true
				}
			}
		}
		return false
	})
	envs := pub.Pod(uid)
	if !hasEvent(envs, "Killing", "Container main definition changed, will be restarted") {
		t.Error(`no Killing event "Container main definition changed, will be restarted"`)
	}
	if !hasEvent(envs, "Pulled", newImage) {
		t.Errorf("no Pulled event for %s", newImage)
	}
	if restarted(envs, "side") || count(envs, "ContainerExited") != 1 {
		t.Errorf("side restarted or more than main exited: %d exits", count(envs, "ContainerExited"))
	}
	if err := a.HandlePodDelete(ctx, up, time.Second); err != nil {
		t.Fatal(err)
	}
	wait("PodDeleted", func(envs []*eventsv1.Envelope) bool { return count(envs, "PodDeleted") > 0 })
}

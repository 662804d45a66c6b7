package sim_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestRuntimeKeepsLastMountAndOneDeadInstance checks what a simulated pod
// keeps: each volume's files as last mounted and how often it was, its
// usage by volume, and per container name its last instance only (a
// restart moves the dead one's log to the previous logs).
func TestRuntimeKeepsLastMountAndOneDeadInstance(t *testing.T) {
	rt, err := sim.New(sim.DefaultConfig("10.244.7.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := &corev1.Container{Name: "app", Image: "nginx"}
	tok, data := &corev1.Volume{Name: "token"}, &corev1.Volume{Name: "data"}
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p", Namespace: "default", Uid: "u1"},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{c}, Volumes: []*corev1.Volume{tok, data}}}
	sb, err := rt.RunPodSandbox(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	mount := func(vols ...nodeagent.VolumeData) {
		t.Helper()
		if err := rt.MountVolumes(ctx, pod, vols); err != nil {
			t.Fatal(err)
		}
	}
	wantVolume := func(name string, files map[string][]byte, mounts int) {
		t.Helper()
		if err := rt.WaitVolume(ctx, "u1", name, func(got map[string][]byte, n int) bool {
			return n == mounts && maps.EqualFunc(got, files, func(x, y []byte) bool { return string(x) == string(y) })
		}); err != nil {
			t.Fatal(err)
		}
	}
	mount(nodeagent.VolumeData{Volume: tok, Files: map[string][]byte{"token": []byte("t1"), "ca.crt": []byte("ca")}})
	wantVolume("token", map[string][]byte{"token": []byte("t1"), "ca.crt": []byte("ca")}, 1)
	mount(nodeagent.VolumeData{Volume: tok, Files: map[string][]byte{"token": []byte("t2")}}, nodeagent.VolumeData{Volume: data})
	wantVolume("token", map[string][]byte{"token": []byte("t2")}, 2)
	wantVolume("data", nil, 1)

	if err := rt.SetVolumeUsage("u1", "data", 42); err != nil {
		t.Fatal(err)
	}
	if err := rt.SetVolumeUsage("u1", "absent", 1); err == nil {
		t.Error("SetVolumeUsage of a volume never mounted succeeded")
	}
	for name, want := range map[string]int64{"data": 42, "token": 0} {
		if got, err := rt.VolumeUsage(ctx, pod, name); err != nil || got != want {
			t.Errorf("VolumeUsage(%s) = %d, %v; want %d", name, got, err, want)
		}
	}

	var ids []nodeagent.ContainerID
	for range 3 {
		id, err := rt.StartContainer(ctx, pod, c, sb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.StopContainer(ctx, id, time.Second); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	list := func() []nodeagent.ContainerInfo {
		t.Helper()
		got, err := rt.ListContainers(ctx, "u1")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := list(); len(got) != 1 || got[0].ID != ids[2] || got[0].Running || got[0].RestartCount != 2 {
		t.Errorf("instances kept = %+v; want only the dead %s (2 restarts)", got, ids[2])
	}
	last, err := rt.StartContainer(ctx, pod, c, sb)
	if err != nil {
		t.Fatal(err)
	}
	if got := list(); len(got) != 1 || got[0].ID != last || !got[0].Running || got[0].RestartCount != 3 {
		t.Errorf("instances kept = %+v; want only the running %s (3 restarts)", got, last)
	}
}

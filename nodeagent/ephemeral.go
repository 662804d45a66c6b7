package nodeagent

import (
	"context"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"google.golang.org/protobuf/proto"
)

// Ephemeral containers (kubectl debug), as kubelet's kuberuntime runs
// them: each container of spec.ephemeralContainers is started once, in
// the pod's sandbox, whatever the pod's restartPolicy and whether or not
// its initialization is complete; it is never restarted — an exit is
// final — and has no probes, hooks or resources (the apiserver refuses
// them). Its image is pulled as any container's (imagePullPolicy,
// ErrImagePull, ImagePullBackOff) and it gets the Events Pulling, Pulled,
// Created and Started; a start that fails is retried under the
// CrashLoopBackOff schedule, as kubelet retries a container it could not
// create. With targetContainerName it runs in the PID namespace of that
// container's running instance (the runtime's EphemeralStarter); a target
// not running holds it back (CreateContainerError). Its status is in
// status.ephemeralContainerStatuses. Deleting the pod stops it with the
// others.

// EphemeralStarter is implemented by runtimes that run ephemeral
// containers. The agent calls it, from the pod's worker, for each
// ephemeral container it starts, with the container's fields as a
// Container resolved as for StartContainer.
type EphemeralStarter interface {
	// StartEphemeralContainer starts c in sb as StartContainer does; when
	// target is set, c joins that running container instance's PID
	// namespace (it sees the target's processes) instead of getting its
	// own (a pod that shares one PID namespace, or uses the host's, keeps
	// it). Its exits arrive on ContainerExits as any container's.
	StartEphemeralContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sb Sandbox, target ContainerID) (ContainerID, error)
}

// AsContainer returns ec's common fields as a Container: the two messages
// have the same field numbers (EphemeralContainerCommon), so the wire
// form of one is the other's; targetContainerName is dropped.
func AsContainer(ec *corev1.EphemeralContainer) *corev1.Container {
	b, err := proto.Marshal(ec)
	c := &corev1.Container{}
	if err == nil {
		err = proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, c)
	}
	if err != nil { // cannot happen for well-formed messages; keep what identifies it
		return &corev1.Container{Name: ec.GetName(), Image: ec.GetImage()}
	}
	return c
}

// onEphemeral adds the ephemeral containers the worker does not know yet.
func (w *worker) onEphemeral(list []*corev1.EphemeralContainer) {
	for _, ec := range list {
		if w.ephByName(ec.GetName()) != nil {
			continue
		}
		c := w.newCtr(AsContainer(ec), false)
		c.ephemeral, c.target = true, ec.GetTargetContainerName()
		w.ephs = append(w.ephs, c)
	}
}

func (w *worker) ephByName(name string) *ctr {
	for _, c := range w.ephs {
		if c.spec.GetName() == name {
			return c
		}
	}
	return nil
}

// syncEphemeral starts each ephemeral container that has not run yet (an
// exit marks it done: see onExit). It returns when to sync again.
func (w *worker) syncEphemeral(ctx context.Context, now time.Time) (wake time.Time) {
	for _, c := range w.ephs {
		if !c.done && !c.running() {
			wake = earliest(wake, w.startContainer(ctx, c, now))
		}
	}
	return wake
}

// runContainer starts c's resolved configuration cfg in the sandbox:
// through StartContainer, or, for an ephemeral container, through the
// runtime's EphemeralStarter with its target's running instance.
func (w *worker) runContainer(ctx context.Context, c *ctr, cfg *corev1.Container) (ContainerID, error) {
	if !c.ephemeral {
		return w.d.rt.StartContainer(ctx, w.pod, cfg, *w.sandbox)
	}
	es, ok := w.d.rt.(EphemeralStarter)
	if !ok {
		return "", Errorf(CodeCreateContainer, "the node's runtime does not run ephemeral containers")
	}
	var target ContainerID
	if c.target != "" {
		t := w.byName(c.target, false)
		if t == nil {
			t = w.byName(c.target, true)
		}
		if t == nil || !t.running() {
			return "", Errorf(CodeCreateContainer, "target container %q is not running", c.target)
		}
		target = t.id
	}
	return es.StartEphemeralContainer(ctx, w.pod, cfg, *w.sandbox, target)
}

// ephemeralStatuses is status.ephemeralContainerStatuses.
func (w *worker) ephemeralStatuses() []*corev1.ContainerStatus {
	var out []*corev1.ContainerStatus
	for _, c := range w.ephs {
		out = append(out, w.containerStatus(c, "ContainerCreating"))
	}
	return out
}

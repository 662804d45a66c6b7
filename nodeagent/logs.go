package nodeagent

import (
	"context"
	"errors"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Container logs, as kubelet serves them (GetKubeletContainerLogs): the
// agent picks the container instance from the pod's status
// (validateContainerLogStatus: the running instance, else the terminated
// one, else the last terminated; with previous, the last terminated one)
// and the runtime reads that instance's log. A container that never ran
// gets kubelet's words for why ("container "x" in pod "y" is waiting to
// start: ContainerCreating"), a BadRequest as kubelet's server answers.
// A finished pod's logs stay readable until the pod is deleted: the
// runtime keeps them when it releases the pod's sandbox (SandboxReleaser).

// LogRequest asks for a container's log from Offset on.
type LogRequest struct {
	Namespace string
	Pod       string
	Container string // "": the pod's only container
	Previous  bool   // the instance before the current one
	Offset    int64  // byte offset in the CRI log file
	// File identifies the file Offset is in (LogChunk.File of the last
	// read); "" on the first read, which starts at the last TailLines
	// lines (nil: all) written at or after SinceTime (Unix ns; 0: any).
	// When the log was rotated since, reading goes on at the start of the
	// current file, as kubelet's follow does.
	File      string
	TailLines *int64
	SinceTime int64
	// UID and ID name the pod and the container instance to read; the
	// agent sets them (Agent.ReadLog). Without ID the runtime picks the
	// newest instance of Container (with Previous, the one before).
	UID string
	ID  ContainerID
}

// LogChunk is a piece of a CRI-format log (whole lines only) and where the
// next read starts. Running says whether the instance still runs (a
// follower stops once it does not and no data is left).
type LogChunk struct {
	Container string
	Data      []byte
	Offset    int64
	File      string
	Running   bool
}

// LogReader is implemented by runtimes that keep container logs.
type LogReader interface {
	// ReadLog reads at most max bytes of the log (whole CRI lines) from
	// req.Offset. An unknown pod or instance is an error with CodeNotFound.
	ReadLog(req LogRequest, max int) (LogChunk, error)
}

// CodeBadRequest: a log request the node refuses as kubelet's server does
// (HTTP 400, relayed by the apiserver as a BadRequest).
const CodeBadRequest Code = "BadRequest"

// ErrBadRequest matches CodeBadRequest.
var ErrBadRequest = &Error{Code: CodeBadRequest}

// ErrNoLogReader is returned by Agent.ReadLog when the runtime keeps no
// logs (the simulated runtime).
var ErrNoLogReader = errors.New("nodeagent: the node's runtime keeps no container logs")

// ReadLog reads a container's log as kubelet's GetKubeletContainerLogs:
// for a pod with a worker the instance is the one its last reported
// status names (validateContainerLogStatus, with kubelet's messages when
// there is none to read, CodeBadRequest); for a pod without one (finished
// before the agent restarted) the runtime picks by name. A pod the node
// does not know is CodeNotFound.
func (a *Agent) ReadLog(req LogRequest, max int) (LogChunk, error) {
	lr, ok := a.rt.(LogReader)
	if !ok {
		return LogChunk{}, ErrNoLogReader
	}
	a.mu.Lock()
	var w *worker
	for _, x := range a.workers {
		md := x.pod.GetMetadata() // name and namespace never change
		if md.GetNamespace() == req.Namespace && md.GetName() == req.Pod && (req.UID == "" || md.GetUid() == req.UID) {
			w = x
		}
	}
	a.mu.Unlock()
	if w == nil {
		return lr.ReadLog(req, max)
	}
	st := w.rep.Reported()
	name, err := logContainer(req.Pod, w.names, st, req.Container)
	if err != nil {
		return LogChunk{}, err
	}
	id, err := logInstance(req.Pod, st, name, req.Previous)
	if err != nil {
		return LogChunk{}, err
	}
	req.Container, req.UID, req.ID = name, w.uid, id
	return lr.ReadLog(req, max)
}

// logContainer is the container a log request names: name, or the pod's
// only container when it names none (the apiserver's validateContainer
// for pods/log, with its messages): names are the pod's containers, st
// its status (for the ephemeral containers).
func logContainer(pod string, names podNames, st *corev1.PodStatus, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	switch len(names.apps) {
	case 1:
		return names.apps[0], nil
	case 0:
		return "", Errorf(CodeBadRequest, "a container name must be specified for pod %s", pod)
	}
	all := append(append([]string(nil), names.inits...), names.apps...)
	for _, s := range st.GetEphemeralContainerStatuses() {
		all = append(all, s.GetName())
	}
	return "", Errorf(CodeBadRequest, "a container name must be specified for pod %s, choose one of: %s", pod, all)
}

// logInstance is kubelet's validateContainerLogStatus: the instance of
// container name whose log is read, from the pod's status st.
func logInstance(pod string, st *corev1.PodStatus, name string, previous bool) (ContainerID, error) {
	var cs *corev1.ContainerStatus
	for _, list := range [][]*corev1.ContainerStatus{st.GetContainerStatuses(), st.GetInitContainerStatuses(), st.GetEphemeralContainerStatuses()} {
		for _, s := range list {
			if cs == nil && s.GetName() == name {
				cs = s
			}
		}
	}
	if cs == nil {
		return "", Errorf(CodeBadRequest, "container %q in pod %q is not available", name, pod)
	}
	last := cs.GetLastTerminationState().GetTerminated()
	waiting, running, terminated := cs.GetState().GetWaiting(), cs.GetState().GetRunning(), cs.GetState().GetTerminated()
	switch {
	case previous:
		if last.GetContainerId() == "" {
			return "", Errorf(CodeBadRequest, "previous terminated container %q in pod %q not found", name, pod)
		}
		return ContainerID(last.GetContainerId()), nil
	case running != nil:
		return ContainerID(cs.GetContainerId()), nil
	case terminated != nil:
		switch {
		case terminated.GetContainerId() != "":
			return ContainerID(terminated.GetContainerId()), nil
		case last.GetContainerId() != "":
			return ContainerID(last.GetContainerId()), nil
		}
		return "", Errorf(CodeBadRequest, "container %q in pod %q is terminated", name, pod)
	case last != nil:
		if last.GetContainerId() == "" {
			return "", Errorf(CodeBadRequest, "container %q in pod %q is terminated", name, pod)
		}
		return ContainerID(last.GetContainerId()), nil
	case waiting != nil:
		switch waiting.GetReason() {
		case string(CodeImagePull):
			return "", Errorf(CodeBadRequest, "container %q in pod %q is waiting to start: image can't be pulled", name, pod)
		case "ImagePullBackOff":
			return "", Errorf(CodeBadRequest, "container %q in pod %q is waiting to start: trying and failing to pull image", name, pod)
		}
		return "", Errorf(CodeBadRequest, "container %q in pod %q is waiting to start: %v", name, pod, waiting.GetReason())
	}
	return "", Errorf(CodeBadRequest, "container %q in pod %q is waiting to start - no logs yet", name, pod)
}

// podNames are the names of a pod's init and app containers, fixed when
// its worker starts (safe to read from any goroutine).
type podNames struct{ inits, apps []string }

func namesOf(pod *corev1.Pod) podNames {
	var n podNames
	for _, c := range pod.GetSpec().GetInitContainers() {
		n.inits = append(n.inits, c.GetName())
	}
	for _, c := range pod.GetSpec().GetContainers() {
		n.apps = append(n.apps, c.GetName())
	}
	return n
}

// SandboxReleaser is implemented by runtimes that keep what kubelet keeps
// of a finished pod. The agent releases the sandbox of a pod that finished
// (Succeeded or Failed, nothing to restart): its containers are stopped
// and its IP, cgroups and volume mounts freed, as kubelet's
// SyncTerminatingPod and SyncTerminatedPod do, while its exited containers
// and their logs stay (kubectl logs, with --previous) until
// RemovePodSandbox, when the pod is deleted. Runtimes without it have
// the sandbox removed whole.
type SandboxReleaser interface {
	// ReleasePodSandbox stops the pod's containers and frees its IP,
	// cgroups and mounts, keeping its containers' logs; idempotent, and a
	// success when there is no sandbox. A later RunPodSandbox for the
	// pod removes the released one and makes a new sandbox.
	ReleasePodSandbox(ctx context.Context, podUID string) error
}

package nodeagent

import (
	"errors"
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TestLogInstance is kubelet's validateContainerLogStatus: which instance
// a log request reads, and its words when there is none.
func TestLogInstance(t *testing.T) {
	term := func(id string) *corev1.ContainerState {
		return &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ContainerId: id}}
	}
	waiting := func(reason string) *corev1.ContainerState {
		return &corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
	}
	running := &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	for _, tc := range []struct {
		name     string
		state    *corev1.ContainerState
		last     *corev1.ContainerState
		id       string
		previous bool
		want     ContainerID
		err      string
	}{
		{name: "running", state: running, id: "c2", want: "c2"},
		{name: "running, previous", state: running, id: "c2", last: term("c1"), previous: true, want: "c1"},
		{name: "no previous", state: running, id: "c1", previous: true,
			err: `previous terminated container "app" in pod "p" not found`},
		{name: "terminated", state: term("c1"), id: "c1", want: "c1"},
		{name: "terminated, next not started", state: term(""), last: term("c1"), want: "c1"},
		{name: "terminated, no instance", state: term(""), err: `container "app" in pod "p" is terminated`},
		{name: "waiting after a run", state: waiting("CrashLoopBackOff"), last: term("c1"), want: "c1"},
		{name: "creating", state: waiting("ContainerCreating"),
			err: `container "app" in pod "p" is waiting to start: ContainerCreating`},
		{name: "initializing", state: waiting("PodInitializing"),
			err: `container "app" in pod "p" is waiting to start: PodInitializing`},
		{name: "pull failed", state: waiting("ErrImagePull"),
			err: `container "app" in pod "p" is waiting to start: image can't be pulled`},
		{name: "pull back-off", state: waiting("ImagePullBackOff"),
			err: `container "app" in pod "p" is waiting to start: trying and failing to pull image`},
		{name: "no state", state: &corev1.ContainerState{},
			err: `container "app" in pod "p" is waiting to start - no logs yet`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &corev1.PodStatus{ContainerStatuses: []*corev1.ContainerStatus{{Name: "app", State: tc.state,
				LastTerminationState: tc.last, ContainerId: tc.id}}}
			got, err := logInstance("p", st, "app", tc.previous)
			if tc.err != "" {
				var e *Error
				if !errors.As(err, &e) || e.Code != CodeBadRequest || e.Msg != tc.err {
					t.Fatalf("err = %v, want BadRequest %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("instance %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	st := &corev1.PodStatus{InitContainerStatuses: []*corev1.ContainerStatus{{Name: "init", State: term("i1")}}}
	if got, err := logInstance("p", st, "init", false); err != nil || got != "i1" {
		t.Errorf("an init container's: %q, %v", got, err)
	}
	if _, err := logInstance("p", st, "nope", false); err == nil || err.(*Error).Msg != `container "nope" in pod "p" is not available` {
		t.Errorf("an unknown container: %v", err)
	}
}

// TestLogContainer: a request naming no container reads the pod's only
// one; with several, the apiserver's refusal lists them.
func TestLogContainer(t *testing.T) {
	one := podNames{apps: []string{"app"}}
	if got, err := logContainer("p", one, nil, ""); err != nil || got != "app" {
		t.Fatalf("the only container: %q, %v", got, err)
	}
	two := podNames{inits: []string{"setup"}, apps: []string{"a", "b"}}
	st := &corev1.PodStatus{EphemeralContainerStatuses: []*corev1.ContainerStatus{{Name: "debugger"}}}
	_, err := logContainer("p", two, st, "")
	if e, ok := errors.AsType[*Error](err); !ok || e.Code != CodeBadRequest ||
		e.Msg != "a container name must be specified for pod p, choose one of: [setup a b debugger]" {
		t.Fatalf("several containers: %v", err)
	}
	if got, err := logContainer("p", two, st, "b"); err != nil || got != "b" {
		t.Fatalf("named: %q, %v", got, err)
	}
}

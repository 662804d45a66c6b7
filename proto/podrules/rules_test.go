package podrules

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
)

func TestAppliedSeq(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want int64
	}{
		{"no metadata", &corev1.Pod{}, 0},
		{"no annotation", &corev1.Pod{Metadata: &corev1.ObjectMeta{Annotations: map[string]string{"a": "b"}}}, 0},
		{"garbage", &corev1.Pod{Metadata: &corev1.ObjectMeta{Annotations: map[string]string{AnnotationStatusSeq: "x"}}}, 0},
		{"recorded", &corev1.Pod{Metadata: &corev1.ObjectMeta{Annotations: map[string]string{AnnotationStatusSeq: "42"}}}, 42},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := AppliedSeq(tc.pod); got != tc.want {
				t.Errorf("AppliedSeq = %d, want %d", got, tc.want)
			}
		})
	}
	p := &corev1.Pod{}
	SetAppliedSeq(p, 7)
	if AppliedSeq(p) != 7 || p.GetMetadata().GetAnnotations()[AnnotationStatusSeq] != "7" {
		t.Errorf("after SetAppliedSeq(7): %v", p.GetMetadata())
	}
}

func TestNamespaceOrDefault(t *testing.T) {
	for given, want := range map[string]string{"": "default", "default": "default", "kube-system": "kube-system"} {
		if got := NamespaceOrDefault(given); got != want {
			t.Errorf("NamespaceOrDefault(%q) = %q, want %q", given, got, want)
		}
	}
}

func TestNewEvent(t *testing.T) {
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "web", Uid: "u1"}}
	ref := PodRef(pod)
	want := &corev1.ObjectReference{Kind: "Pod", ApiVersion: "v1", Name: "web", Uid: "u1"}
	if !proto.Equal(ref, want) {
		t.Fatalf("PodRef = %v, want %v", ref, want)
	}
	ts := timestamppb.Now()
	ev := NewEvent(ref, EventNormal, "Scheduled", "assigned", "default-scheduler", "scheduler-0", ts)
	if got := ev.GetMetadata().GetNamespace(); got != DefaultNamespace {
		t.Errorf("namespace = %q, want the default", got)
	}
	name := EventName(ref, EventNormal, "Scheduled", "assigned", "default-scheduler")
	if ev.GetMetadata().GetName() != name || len(name) != len("web.")+16 || name[:4] != "web." {
		t.Errorf("name = %q (EventName %q), want web.<16 hex digits>", ev.GetMetadata().GetName(), name)
	}
	if ev.GetCount() != 1 || ev.GetFirstTimestamp() != ts || ev.GetLastTimestamp() != ts ||
		ev.GetSource().GetComponent() != "default-scheduler" || ev.GetSource().GetHost() != "scheduler-0" ||
		ev.GetReportingComponent() != "default-scheduler" || ev.GetReportingInstance() != "scheduler-0" {
		t.Errorf("event = %v", ev)
	}
	for _, other := range []string{
		EventName(ref, EventWarning, "Scheduled", "assigned", "default-scheduler"),
		EventName(ref, EventNormal, "Pulled", "assigned", "default-scheduler"),
		EventName(ref, EventNormal, "Scheduled", "other", "default-scheduler"),
		EventName(ref, EventNormal, "Scheduled", "assigned", "kubelet"),
	} {
		if other == name {
			t.Errorf("EventName does not tell occurrences apart: %q", other)
		}
	}
	if EventCause(ev) != "" || ev.GetMetadata().GetAnnotations() != nil {
		t.Errorf("a new event has a cause: %v", ev.GetMetadata())
	}
	SetEventCause(ev, "")
	if ev.GetMetadata().GetAnnotations() != nil {
		t.Error("an empty cause was recorded")
	}
	SetEventCause(ev, "uid/u1/PodScheduled/g1/a1")
	if EventCause(ev) != "uid/u1/PodScheduled/g1/a1" {
		t.Errorf("cause = %q", EventCause(ev))
	}
	er := EndpointRef(pod, "shop")
	if !proto.Equal(er, &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web", Uid: "u1"}) {
		t.Errorf("EndpointRef = %v", er)
	}
}

// TestPodRequests pins k8s.io/component-helpers resource.PodRequests.
func TestPodRequests(t *testing.T) {
	sidecar := func(c *corev1.Container) *corev1.Container {
		c.RestartPolicy = "Always"
		return c
	}
	nonMissing := &Resources{MilliCPU: 100, Memory: 200 << 20}
	tests := []struct {
		name       string
		app, init  []*corev1.Container
		want, nonZ Resources
	}{
		{"empty", nil, nil, Resources{}, Resources{}},
		{"best effort", []*corev1.Container{{Name: "a"}}, nil, Resources{}, Resources{MilliCPU: 100, Memory: 200 << 20}},
		{"sum of containers",
			[]*corev1.Container{rr(m("cpu", "250m", "memory", "64Mi"), nil), rr(m("cpu", "1", "ephemeral-storage", "1Gi"), nil)}, nil,
			Resources{MilliCPU: 1250, Memory: 64 << 20, EphemeralStorage: 1 << 30}, Resources{MilliCPU: 1250, Memory: 264 << 20, EphemeralStorage: 1 << 30}},
		{"limit is the missing request", []*corev1.Container{rr(nil, m("cpu", "2", "memory", "1Gi", "ephemeral-storage", "2Gi"))}, nil,
			Resources{MilliCPU: 2000, Memory: 1 << 30, EphemeralStorage: 2 << 30}, Resources{MilliCPU: 2000, Memory: 1 << 30, EphemeralStorage: 2 << 30}},
		{"a named zero is not missing", []*corev1.Container{rr(m("cpu", "0"), nil)}, nil, Resources{}, Resources{Memory: 200 << 20}},
		{"largest init container wins", []*corev1.Container{rr(m("cpu", "100m"), nil)}, []*corev1.Container{rr(m("cpu", "2"), nil)},
			Resources{MilliCPU: 2000}, Resources{MilliCPU: 2000, Memory: 200 << 20}},
		{"sidecars run beside the app and later inits",
			[]*corev1.Container{rr(m("cpu", "500m"), nil)},
			[]*corev1.Container{sidecar(rr(m("cpu", "300m"), nil)), rr(m("cpu", "1"), nil)},
			Resources{MilliCPU: 1300}, Resources{MilliCPU: 1300, Memory: 400 << 20}},
		{"pods is not requested", []*corev1.Container{rr(m("pods", "3"), nil)}, nil, Resources{}, Resources{MilliCPU: 100, Memory: 200 << 20}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: &corev1.PodSpec{Containers: tc.app, InitContainers: tc.init}}
			got, err := PodRequests(pod, PodResourcesOptions{})
			if err != nil || got != tc.want {
				t.Errorf("PodRequests = %+v, %v; want %+v", got, err, tc.want)
			}
			nz, err := PodRequests(pod, PodResourcesOptions{NonMissingContainerRequests: nonMissing})
			if err != nil || nz != tc.nonZ {
				t.Errorf("PodRequests(non-missing) = %+v, %v; want %+v", nz, err, tc.nonZ)
			}
		})
	}
}

func TestParseResourceList(t *testing.T) {
	got, err := ParseResourceList(map[string]string{"cpu": "1.5", "memory": "1Gi", "pods": "110", "nvidia.com/gpu": "x"})
	if want := (Resources{MilliCPU: 1500, Memory: 1 << 30, Pods: 110}); err != nil || got != want {
		t.Errorf("ParseResourceList = %+v, %v; want %+v", got, err, want)
	}
	if _, err := ParseResourceList(map[string]string{"cpu": "four"}); !errors.Is(err, ErrInvalidQuantity) {
		t.Errorf("bad quantity: %v, want ErrInvalidQuantity", err)
	}
	pod := &corev1.Pod{Spec: &corev1.PodSpec{Containers: []*corev1.Container{rr(nil, m("memory", "much"))}}}
	if _, err := PodRequests(pod, PodResourcesOptions{}); !errors.Is(err, ErrInvalidQuantity) {
		t.Errorf("bad limit: %v, want ErrInvalidQuantity", err)
	}
}

func TestResourcesArithmetic(t *testing.T) {
	r := Resources{MilliCPU: 500, Memory: 1 << 20, EphemeralStorage: 10, Pods: 1}
	r.Add(Resources{MilliCPU: 250, Memory: 1 << 20, Pods: 1})
	if want := (Resources{MilliCPU: 750, Memory: 2 << 20, EphemeralStorage: 10, Pods: 2}); r != want {
		t.Fatalf("Add = %+v, want %+v", r, want)
	}
	r.Sub(Resources{MilliCPU: 750, Memory: 1 << 20, EphemeralStorage: 10, Pods: 1})
	if want := (Resources{Memory: 1 << 20, Pods: 1}); r != want {
		t.Fatalf("Sub = %+v, want %+v", r, want)
	}
	r.Max(Resources{MilliCPU: 100, Memory: 1, EphemeralStorage: 5})
	if want := (Resources{MilliCPU: 100, Memory: 1 << 20, EphemeralStorage: 5, Pods: 1}); r != want {
		t.Fatalf("Max = %+v, want %+v", r, want)
	}
}

func TestSysctlNamespace(t *testing.T) {
	for name, want := range map[string]string{
		"net.ipv4.tcp_syncookies": "net", "net.core.somaxconn": "net",
		"kernel.shm_rmid_forced": "ipc", "kernel.msgmax": "ipc", "kernel.sem": "ipc", "fs.mqueue.msg_max": "ipc",
		"kernel.semx": "", "kernel.panic": "", "vm.swappiness": "", "fs.file-max": "", "network": "",
	} {
		if got := SysctlNamespace(name); got != want {
			t.Errorf("SysctlNamespace(%q) = %q, want %q", name, got, want)
		}
	}
}

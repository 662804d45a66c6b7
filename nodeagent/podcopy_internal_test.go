package nodeagent

import (
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// copyPod is a pod as admission leaves it: tolerations, the ServiceAccount
// token volume, resources, a bound status.
func copyPod(name string) *corev1.Pod {
	exp := int64(3607)
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name, Labels: map[string]string{"app": "x"}},
		Spec: &corev1.PodSpec{NodeName: "n1", ServiceAccountName: "default",
			Containers: []*corev1.Container{{Name: "app", Image: "nginx:1.27",
				Resources:    &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "10m"}, Limits: map[string]string{"memory": "64Mi"}},
				VolumeMounts: []*corev1.VolumeMount{{Name: "kube-api-access-" + name, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}}},
			Volumes: []*corev1.Volume{{Name: "kube-api-access-" + name, Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
				{ConfigMap: &corev1.ConfigMapProjection{Name: "kube-root-ca.crt", Items: []*corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			}}}},
			Tolerations: []*corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: "Exists", Effect: "NoExecute"}},
			Affinity:    &corev1.Affinity{}},
		Status: &corev1.PodStatus{Phase: "Running", StartTime: timestamppb.New(time.Unix(1_800_000_000, 0)), PodIp: "10.0.0.9",
			Conditions: []*corev1.PodCondition{{Type: "PodScheduled", Status: "True", LastTransitionTime: timestamppb.New(time.Unix(1_800_000_000, 0))}}},
	}
}

// TestWorkerCopy: the worker's copy of a pod keeps what a node reads of
// it (equal to the pod but for the scheduling fields and the status the
// worker builds itself), shares the token volume's sources and the
// resources between pods, and never aliases the caller's pod.
func TestWorkerCopy(t *testing.T) {
	a, b := copyPod("a"), copyPod("b")
	ca, cb := workerCopy(a), workerCopy(b)

	want := vt.Clone(a)
	want.Spec.Tolerations, want.Spec.Affinity = nil, nil
	want.Status = &corev1.PodStatus{StartTime: a.Status.StartTime, Conditions: a.Status.Conditions}
	if !vt.Equal(ca, want) {
		t.Fatalf("copy\n%v\nwant\n%v", ca, want)
	}
	if ca.Spec.Volumes[0].Projected != cb.Spec.Volumes[0].Projected {
		t.Error("two pods' equal token volume sources are not shared")
	}
	if ca.Spec.Containers[0].Resources != cb.Spec.Containers[0].Resources {
		t.Error("two pods' equal resources are not shared")
	}
	if ca.Spec.Volumes[0].Projected == a.Spec.Volumes[0].Projected || ca.Metadata == a.Metadata || ca.Status.Conditions[0] == a.Status.Conditions[0] {
		t.Error("the copy aliases the caller's pod")
	}
	// Another resources: its own.
	c := copyPod("c")
	c.Spec.Containers[0].Resources.Requests["cpu"] = "20m"
	if cc := workerCopy(c); cc.Spec.Containers[0].Resources == ca.Spec.Containers[0].Resources || cc.Spec.Containers[0].Resources.Requests["cpu"] != "20m" {
		t.Errorf("pods of other resources share them: %v", cc.Spec.Containers[0].Resources)
	}
	runtime.KeepAlive(ca)
	runtime.KeepAlive(cb)
}

// TestWorkerTake: the worker's copy of a pod handed over is the copy
// workerCopy makes, made of the pod's own parts.
func TestWorkerTake(t *testing.T) {
	a := copyPod("a")
	want := workerCopy(copyPod("a"))
	md, spec, cond := a.Metadata, a.Spec, a.Status.Conditions[0]
	got := workerTake(a)
	if !vt.Equal(got, want) {
		t.Fatalf("taken\n%v\nwant\n%v", got, want)
	}
	if got.Metadata != md || got.Spec != spec || got.Status.Conditions[0] != cond {
		t.Error("the taken pod's parts were copied")
	}
	if got.Spec.Volumes[0].Projected != want.Spec.Volumes[0].Projected {
		t.Error("a taken pod's token volume sources are not shared with a copied one's")
	}
	runtime.KeepAlive(want)
}

// TestSharingForgets: a shared message no one holds any more is dropped
// from the table once collected.
func TestSharingForgets(t *testing.T) {
	s := newSharing[corev1.ResourceRequirements]()
	r := s.share(&corev1.ResourceRequirements{Requests: map[string]string{"cpu": "1"}})
	if got := s.share(&corev1.ResourceRequirements{Requests: map[string]string{"cpu": "1"}}); got != r {
		t.Fatal("an equal message is not shared")
	}
	runtime.KeepAlive(r)
	// The cleanups run on a goroutine of their own after a collection;
	// the bound is only against a hang (a loaded CI machine is slow).
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		runtime.GC()
		s.mu.Lock()
		n := len(s.m)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // the cleanup runs on its own goroutine
	}
	t.Fatal("a collected message stays in the table")
}

// TestWorkerCopySharesLabels: pods of equal labels share one map, others
// keep their own; a holder whose labels are replaced later (onMeta) does
// not change what the next pod gets; the table forgets a collected
// holder.
func TestWorkerCopySharesLabels(t *testing.T) {
	same := func(x, y map[string]string) bool {
		return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	}
	a, b := copyPod("a"), copyPod("b")
	ca, cb := workerCopy(a), workerCopy(b)
	if !same(ca.Metadata.Labels, cb.Metadata.Labels) {
		t.Error("two pods' equal labels are not shared")
	}
	if same(ca.Metadata.Labels, a.Metadata.Labels) || same(ca.Metadata.Labels, b.Metadata.Labels) {
		t.Error("the copies share the callers' maps")
	}
	other := copyPod("o")
	other.Metadata.Labels = map[string]string{"app": "x", "tier": "web"}
	if co := workerCopy(other); same(co.Metadata.Labels, ca.Metadata.Labels) || len(co.Metadata.Labels) != 2 {
		t.Errorf("other labels share the map: %v", co.Metadata.Labels)
	}
	// The first pod's labels are replaced, as onMeta does: the next pod
	// still gets the labels it has.
	ca.Metadata.Labels = map[string]string{"app": "y"}
	if cc := workerCopy(copyPod("c")); cc.Metadata.Labels["app"] != "x" || !same(cc.Metadata.Labels, cb.Metadata.Labels) {
		t.Errorf("after the holder's labels changed, a new pod's labels are %v", cc.Metadata.Labels)
	}
	runtime.KeepAlive(ca)
	runtime.KeepAlive(cb)

	s := &labelSharing{m: map[string]labelEntry{}}
	func() {
		md := &corev1.ObjectMeta{Labels: map[string]string{"k": "v"}}
		s.share(md)
		runtime.KeepAlive(md)
	}()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		runtime.GC()
		s.mu.Lock()
		n := len(s.m)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // the cleanup runs on its own goroutine
	}
	t.Fatal("the labels of a collected holder stay in the table")
}

// TestLabelsKey: equal maps, and only they, have equal keys, whatever
// bytes the labels hold.
func TestLabelsKey(t *testing.T) {
	for _, tc := range []struct {
		x, y  map[string]string
		equal bool
	}{
		{map[string]string{"a": "1", "b": "2"}, map[string]string{"b": "2", "a": "1"}, true},
		{map[string]string{"a": "b\x00c=d"}, map[string]string{"a": "b", "c": "d"}, false},
		{map[string]string{"a": "bc"}, map[string]string{"ab": "c"}, false},
		{map[string]string{"a": ""}, map[string]string{"": "a"}, false},
	} {
		if got := labelsKey(tc.x) == labelsKey(tc.y); got != tc.equal {
			t.Errorf("labelsKey(%q) == labelsKey(%q): %v, want %v", tc.x, tc.y, got, tc.equal)
		}
	}
}

// TestWorkerCopyInterns: the copies of two pods decoded apart (each
// string an allocation of its own) hold one copy of the strings they
// have alike, and their own of the rest.
func TestWorkerCopyInterns(t *testing.T) {
	decoded := func(name string) *corev1.Pod {
		p := copyPod(name)
		p.Metadata.Annotations = map[string]string{"podflow.io/request-id": "req-" + name}
		p.Spec.Containers[0].Command = []string{"/bin/app", "--serve"}
		b, err := p.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		out := &corev1.Pod{}
		if err := out.UnmarshalVT(b); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := workerCopy(decoded("a")), workerCopy(decoded("b"))
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	ca, cb := a.Spec.Containers[0], b.Spec.Containers[0]
	annKey := func(p *corev1.Pod) string {
		for k := range p.Metadata.Annotations {
			return k
		}
		return ""
	}
	for _, tc := range []struct {
		field string
		x, y  string
	}{
		{"namespace", a.Metadata.Namespace, b.Metadata.Namespace},
		{"annotation key", annKey(a), annKey(b)},
		{"nodeName", a.Spec.NodeName, b.Spec.NodeName},
		{"serviceAccountName", a.Spec.ServiceAccountName, b.Spec.ServiceAccountName},
		{"container name", ca.Name, cb.Name},
		{"image", ca.Image, cb.Image},
		{"command", ca.Command[1], cb.Command[1]},
		{"mountPath", ca.VolumeMounts[0].MountPath, cb.VolumeMounts[0].MountPath},
		{"condition type", a.Status.Conditions[0].Type, b.Status.Conditions[0].Type},
	} {
		if tc.x != tc.y || !same(tc.x, tc.y) {
			t.Errorf("%s: %q and %q are two copies", tc.field, tc.x, tc.y)
		}
	}
	if a.Metadata.Annotations["podflow.io/request-id"] != "req-a" || b.Metadata.Annotations["podflow.io/request-id"] != "req-b" {
		t.Errorf("annotations %v, %v: want each pod's own value", a.Metadata.Annotations, b.Metadata.Annotations)
	}
}

package endpoints

import (
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/stage"
)

// TestDecodeWatchedPod: the pod watch keeps what makes a pod an endpoint
// and names it in an announcement, and drops the rest of the pod.
func TestDecodeWatchedPod(t *testing.T) {
	full := reported(pod("a", "10.0.0.1", map[string]string{"app": "web"}, true, &corev1.ContainerPort{Name: "http", ContainerPort: 80}), 7)
	full.Metadata.Annotations[stage.AnnotationRequestID] = "req"
	full.Metadata.Annotations[stage.AnnotationTraceparent] = "tp"
	full.Metadata.Annotations["big"] = "dropped"
	full.Metadata.OwnerReferences = []*corev1.OwnerReference{{Kind: "ReplicaSet", Name: "rs"}}
	full.Metadata.DeletionTimestamp = timestamppb.Now()
	full.Spec.Hostname, full.Spec.Subdomain = "h", "web"
	full.Status.PodIps = []*corev1.PodIP{{Ip: "10.0.0.1"}}
	full.Status.Conditions = append(full.Status.Conditions, &corev1.PodCondition{Type: "ContainersReady", Status: "True"})
	full.Status.ContainerStatuses = []*corev1.ContainerStatus{{Name: "c", Image: "busybox"}}
	b, err := vt.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	got := &corev1.Pod{}
	if err := decodeWatchedPod(&raftstore.KV{Key: "/registry/pods/default/a", Value: b, ModRevision: 42}, got); err != nil {
		t.Fatal(err)
	}
	md := got.GetMetadata()
	if md.GetName() != "a" || md.GetUid() != "a-uid" || md.GetResourceVersion() != "42" || !maps.Equal(md.GetLabels(), full.Metadata.Labels) ||
		md.GetDeletionTimestamp() == nil || len(md.GetOwnerReferences()) != 0 {
		t.Errorf("metadata %v", md)
	}
	if want := map[string]string{podrules.AnnotationStatusSeq: "7", stage.AnnotationRequestID: "req", stage.AnnotationTraceparent: "tp"}; !maps.Equal(md.GetAnnotations(), want) {
		t.Errorf("annotations %v, want %v", md.GetAnnotations(), want)
	}
	want := &corev1.PodSpec{NodeName: "n1", Hostname: "h", Subdomain: "web"}
	if !proto.Equal(got.GetSpec(), want) {
		t.Errorf("spec %v, want %v", got.GetSpec(), want)
	}
	st := got.GetStatus()
	if st.GetPodIp() != "10.0.0.1" || len(st.GetPodIps()) != 1 || len(st.GetConditions()) != 1 || !podrules.IsPodReady(got) ||
		st.GetPhase() != "" || len(st.GetContainerStatuses()) != 0 {
		t.Errorf("status %v, want the IPs and the Ready condition only", st)
	}
}

// TestEndpointsChanged: kube's podEndpointsChanged, change by change.
func TestEndpointsChanged(t *testing.T) {
	base := func() *corev1.Pod {
		p := pod("a", "10.0.0.1", map[string]string{"app": "web"}, true, nil)
		p.Status.PodIps = []*corev1.PodIP{{Ip: "10.0.0.1"}}
		return p
	}
	tests := []struct {
		name          string
		change        func(p *corev1.Pod)
		pod, labelsCh bool
	}{
		{"nothing it reads", func(p *corev1.Pod) { p.Status.Phase = "Succeeded" }, false, false},
		{"readiness", func(p *corev1.Pod) { p.Status.Conditions[0].Status = "False" }, true, false},
		{"termination", func(p *corev1.Pod) { p.Metadata.DeletionTimestamp = timestamppb.Now() }, true, false},
		{"IP", func(p *corev1.Pod) { p.Status.PodIp, p.Status.PodIps = "10.0.0.9", []*corev1.PodIP{{Ip: "10.0.0.9"}} }, true, false},
		{"node", func(p *corev1.Pod) { p.Spec.NodeName = "n2" }, true, false},
		{"hostname", func(p *corev1.Pod) { p.Spec.Hostname = "h" }, true, false},
		{"labels", func(p *corev1.Pod) { p.Metadata.Labels = map[string]string{"app": "db"} }, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, p := base(), base()
			tt.change(p)
			if gotPod, gotLabels := endpointsChanged(old, p); gotPod != tt.pod || gotLabels != tt.labelsCh {
				t.Errorf("endpointsChanged = %v, %v; want %v, %v", gotPod, gotLabels, tt.pod, tt.labelsCh)
			}
		})
	}
}

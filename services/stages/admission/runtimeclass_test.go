package admission

import (
	"maps"
	"strings"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

// TestRuntimeClassAdmission: Kubernetes' RuntimeClass admission plugin —
// an unknown class is refused 403, the class's overhead is set, its node
// selector merged and its tolerations added (the conformance tests
// "RuntimeClass should reject a Pod requesting a non-existent / deleted
// RuntimeClass" and "should schedule a Pod requesting a RuntimeClass and
// initialize its Overhead").
func TestRuntimeClassAdmission(t *testing.T) {
	kata := &RuntimeClass{Name: "kata", Handler: "kata", Overhead: map[string]string{"cpu": "10m", "memory": "1Mi"},
		NodeSelector: map[string]string{"runtime": "kata"},
		Tolerations:  []*corev1.Toleration{{Key: "kata", Operator: "Exists", Effect: "NoSchedule"}}}
	plain := &RuntimeClass{Name: "plain", Handler: "runc"}
	named := func(rc string, edits ...func(*corev1.Pod)) *corev1.Pod {
		return pod(append([]func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.RuntimeClassName = rc }}, edits...)...)
	}
	tests := []struct {
		name      string
		pod       *corev1.Pod
		rc        *RuntimeClass
		forbidden string // "" = admitted
		check     func(*corev1.Pod) string
	}{
		{name: "no class", pod: pod(), check: func(p *corev1.Pod) string {
			if len(p.Spec.Overhead) != 0 {
				return "overhead set"
			}
			return ""
		}},
		{name: "unknown class", pod: named("gone"), forbidden: `pods "web" is forbidden: pod rejected: RuntimeClass "gone" not found`},
		{name: "another class given", pod: named("gone"), rc: plain, forbidden: `RuntimeClass "gone" not found`},
		{name: "without overhead", pod: named("plain"), rc: plain, check: func(p *corev1.Pod) string {
			if len(p.Spec.Overhead) != 0 || len(p.Spec.NodeSelector) != 0 {
				return "overhead or selector set"
			}
			return ""
		}},
		{name: "overhead, selector, tolerations", pod: named("kata"), rc: kata, check: func(p *corev1.Pod) string {
			if !maps.Equal(p.Spec.Overhead, kata.Overhead) || p.Spec.NodeSelector["runtime"] != "kata" ||
				len(p.Spec.Tolerations) == 0 || p.Spec.Tolerations[len(p.Spec.Tolerations)-1].Key != "kata" {
				return "overhead " + strings.Join(slicesOf(p.Spec.Overhead), ",")
			}
			return ""
		}},
		{name: "the same overhead in other words", pod: named("kata", func(p *corev1.Pod) {
			p.Spec.Overhead = map[string]string{"cpu": "0.01", "memory": "1024Ki"}
		}), rc: kata},
		{name: "another overhead", pod: named("kata", func(p *corev1.Pod) { p.Spec.Overhead = map[string]string{"cpu": "1"} }), rc: kata,
			forbidden: "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"},
		{name: "overhead without a class", pod: pod(func(p *corev1.Pod) { p.Spec.Overhead = map[string]string{"cpu": "1"} }),
			forbidden: "pod rejected: Overhead provided with no RuntimeClass"},
		{name: "overhead with a class without", pod: named("plain", func(p *corev1.Pod) { p.Spec.Overhead = map[string]string{"cpu": "1"} }), rc: plain,
			forbidden: "pod rejected: Overhead provided with no RuntimeClass"},
		{name: "conflicting node selector", pod: named("kata", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"runtime": "runc"} }), rc: kata,
			forbidden: "conflict: runtimeClass.scheduling.nodeSelector[runtime] = kata; pod.spec.nodeSelector[runtime] = runc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Admit(tc.pod, State{RuntimeClass: tc.rc})
			if tc.forbidden != "" {
				if res.Allowed() || res.Status.GetCode() != 403 || res.Status.GetReason() != "Forbidden" || !strings.Contains(res.Status.GetMessage(), tc.forbidden) {
					t.Fatalf("status %v, want 403 Forbidden %q", res.Status, tc.forbidden)
				}
				return
			}
			if !res.Allowed() {
				t.Fatalf("refused: %v", res.Status)
			}
			if tc.check != nil {
				if msg := tc.check(res.Pod); msg != "" {
					t.Error(msg)
				}
			}
			again := Admit(res.Pod, State{RuntimeClass: tc.rc})
			if !again.Allowed() || len(again.Mutations) != 0 {
				t.Errorf("admitting again: %v %v", again.Status, again.Mutations)
			}
		})
	}
}

func slicesOf(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// TestRuntimeClassFromStore reads the stored form of a RuntimeClass.
func TestRuntimeClassFromStore(t *testing.T) {
	u := &corev1.Unstructured{Metadata: &corev1.ObjectMeta{Name: "kata"}, ApiVersion: "node.k8s.io/v1", Kind: "RuntimeClass",
		Content: []byte(`{"handler":"kata","overhead":{"podFixed":{"cpu":"10m","memory":"1Mi"}},` +
			`"scheduling":{"nodeSelector":{"runtime":"kata"},"tolerations":[{"key":"kata","operator":"Exists","effect":"NoSchedule","tolerationSeconds":5}]}}`)}
	rc, err := RuntimeClassFromStore(u)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Name != "kata" || rc.Handler != "kata" || rc.Overhead["cpu"] != "10m" || rc.Overhead["memory"] != "1Mi" ||
		rc.NodeSelector["runtime"] != "kata" || len(rc.Tolerations) != 1 || rc.Tolerations[0].GetTolerationSeconds() != 5 {
		t.Errorf("read %+v", rc)
	}
	plain, err := RuntimeClassFromStore(&corev1.Unstructured{Metadata: &corev1.ObjectMeta{Name: "p"}, Content: []byte(`{"handler":"runc"}`)})
	if err != nil || plain.Overhead != nil || plain.NodeSelector != nil {
		t.Errorf("plain: %+v %v", plain, err)
	}
	if _, err := RuntimeClassFromStore(&corev1.Unstructured{Metadata: &corev1.ObjectMeta{Name: "bad"}, Content: []byte(`{`)}); err == nil {
		t.Error("a corrupt RuntimeClass was read")
	}
}

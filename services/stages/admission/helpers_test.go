package admission

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
)

// pod returns a minimal valid pod that meets the restricted level, with
// the edits applied.
func pod(edits ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: &corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   proto.Bool(true),
				SeccompProfile: &corev1.SeccompProfile{Type: "RuntimeDefault"},
			},
			Containers: []*corev1.Container{{
				Name:  "app",
				Image: "registry.local/web:1.2",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: proto.Bool(false),
					Capabilities:             &corev1.Capabilities{Drop: []string{"ALL"}},
				},
			}},
		},
	}
	for _, e := range edits {
		e(p)
	}
	return p
}

func app(p *corev1.Pod) *corev1.Container { return p.Spec.Containers[0] }

func nsWithLevel(level string) *corev1.Namespace {
	ns := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: "default"}}
	if level != "" {
		ns.Metadata.Labels = map[string]string{LabelEnforce: level}
	}
	return ns
}

func causeFields(st *corev1.Status) []string {
	var out []string
	for _, c := range st.GetCauses() {
		out = append(out, c.GetType()+" "+c.GetField())
	}
	return out
}

func mustAdmit(t *testing.T, p *corev1.Pod, s State) Result {
	t.Helper()
	res := Admit(p, s)
	if !res.Allowed() {
		t.Fatalf("rejected: %s", res.Status.GetMessage())
	}
	return res
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func fmtv(v any) string { return fmt.Sprint(v) }

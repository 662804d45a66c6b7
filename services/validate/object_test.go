package validate

import (
	"strings"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

func TestObject(t *testing.T) {
	big := strings.Repeat("x", MaxDataBytes/2+1)
	for _, c := range []struct {
		name  string
		obj   objects.Object
		field string // "" when valid
		msg   string
	}{
		{"configmap", &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "a.b-c", Namespace: "default"}, Data: map[string]string{"k": "v"}}, "", ""},
		{"slash in a name", &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "a/b", Namespace: "default"}}, "metadata.name", "RFC 1123 subdomain"},
		{"no name", &corev1.Secret{Metadata: &corev1.ObjectMeta{Namespace: "default"}}, "metadata.name", "Required value"},
		{"bad namespace", &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "s", Namespace: "Bad_NS"}}, "metadata.namespace", "RFC 1123 label"},
		{"namespace with a dot", &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: "a.b"}}, "metadata.name", "must not contain dots"},
		{"service starting with a digit", &corev1.Service{Metadata: &corev1.ObjectMeta{Name: "1web", Namespace: "default"}}, "metadata.name", "DNS-1035 label"},
		{"role with a colon", &corev1.ClusterRole{Metadata: &corev1.ObjectMeta{Name: "system:view"}}, "", ""},
		{"role with a slash", &corev1.Role{Metadata: &corev1.ObjectMeta{Name: "a/b", Namespace: "default"}}, "metadata.name", `may not contain '/'`},
		{"node with a slash", &corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n/1"}}, "metadata.name", "RFC 1123 subdomain"},
		{"configmap of 1 MiB", &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "c", Namespace: "default"},
			Data: map[string]string{"a": big[:MaxDataBytes/2], "b": big[:MaxDataBytes/2]}}, "", ""},
		{"configmap past 1 MiB", &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "c", Namespace: "default"},
			Data: map[string]string{"a": big}, BinaryData: map[string][]byte{"b": []byte(big)}}, "[]", "may not be more than 1048576 bytes"},
		{"secret past 1 MiB", &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "s", Namespace: "default"},
			Data: map[string][]byte{"a": []byte(big), "b": []byte(big)}}, "data", "may not be more than 1048576 bytes"},
		{"bad data key", &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "c", Namespace: "default"}, Data: map[string]string{"a/b": "v"}}, "data[a/b]", "valid config key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := Object(c.obj)
			if c.field == "" {
				if st != nil {
					t.Fatalf("refused: %v", st)
				}
				return
			}
			if st == nil || st.GetCode() != 422 || st.GetReason() != "Invalid" || !strings.Contains(st.GetMessage(), c.msg) {
				t.Fatalf("got %v, want 422 %q", st, c.msg)
			}
			found := false
			for _, cause := range st.GetCauses() {
				found = found || cause.GetField() == c.field
			}
			if !found {
				t.Fatalf("no cause at %s: %v", c.field, st.GetCauses())
			}
		})
	}
}

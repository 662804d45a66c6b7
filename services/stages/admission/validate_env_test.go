package admission

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

// TestEnvValueFrom: an env variable's valueFrom takes exactly one of
// fieldRef, resourceFieldRef, configMapKeyRef and secretKeyRef, as
// Kubernetes' validateEnvVarValueFrom, with its three messages; a
// resourceFieldRef alone is admitted (its containerName may be left out).
func TestEnvValueFrom(t *testing.T) {
	fieldRef := &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}
	resRef := &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: "1Mi"}
	cmRef := &corev1.KeySelector{Name: "cm", Key: "k"}
	secRef := &corev1.KeySelector{Name: "s", Key: "k"}
	const path = "spec.containers[0].env[0].valueFrom"
	tests := []struct {
		name    string
		value   string
		from    *corev1.EnvVarSource
		field   string
		message string // "" admitted
	}{
		{name: "resourceFieldRef alone", from: &corev1.EnvVarSource{ResourceFieldRef: resRef}},
		{name: "resourceFieldRef naming its container", from: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "app", Resource: "requests.cpu"}}},
		{name: "resourceFieldRef of hugepages", from: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.hugepages-2Mi", Divisor: "1Mi"}}},
		{name: "fieldRef alone", from: &corev1.EnvVarSource{FieldRef: fieldRef}},
		{name: "configMapKeyRef alone", from: &corev1.EnvVarSource{ConfigMapKeyRef: cmRef}},
		{name: "secretKeyRef alone", from: &corev1.EnvVarSource{SecretKeyRef: secRef}},
		{name: "none", from: &corev1.EnvVarSource{}, field: path,
			message: "Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"},
		{name: "resourceFieldRef and fieldRef", from: &corev1.EnvVarSource{ResourceFieldRef: resRef, FieldRef: fieldRef}, field: path,
			message: `Invalid value: "": may not have more than one field specified at a time`},
		{name: "configMapKeyRef and secretKeyRef", from: &corev1.EnvVarSource{ConfigMapKeyRef: cmRef, SecretKeyRef: secRef}, field: path,
			message: `Invalid value: "": may not have more than one field specified at a time`},
		{name: "with a value", value: "v", from: &corev1.EnvVarSource{ResourceFieldRef: resRef}, field: path,
			message: "Invalid value: \"\": may not be specified when `value` is not empty"},
		{name: "resourceFieldRef unknown resource", from: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.gpu"}},
			field: path + ".resourceFieldRef.resource", message: `Unsupported value: "limits.gpu": supported values: "limits.cpu", "limits.ephemeral-storage", "limits.memory", "requests.cpu", "requests.ephemeral-storage", "requests.memory"`},
		{name: "resourceFieldRef bad divisor", from: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: "1Mi"}},
			field: path + ".resourceFieldRef.divisor", message: `Invalid value: "limits.cpu": only divisor's values 1m and 1 are supported with the cpu resource`},
		// client-go sends a divisor left out as "0": Kubernetes' unset.
		{name: "resourceFieldRef divisor 0", from: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: "0"}}},
		{name: "resourceFieldRef divisor 0Mi", from: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: "0Mi"}}},
		{name: "resourceFieldRef divisor not a quantity", from: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: "one"}},
			field: path + ".resourceFieldRef.divisor", message: `Invalid value: "one": must be a valid quantity, e.g. 100m or 128Mi`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pod(func(p *corev1.Pod) {
				app(p).Env = []*corev1.EnvVar{{Name: "E", Value: tc.value, ValueFrom: tc.from}}
			})
			st := Admit(p, State{}).Status
			if tc.message == "" {
				if st != nil {
					t.Fatalf("refused: %s", st.GetMessage())
				}
				return
			}
			if st.GetCode() != 422 || len(st.GetCauses()) != 1 {
				t.Fatalf("status = %v, want 422 with one cause", st)
			}
			if c := st.GetCauses()[0]; c.GetField() != tc.field || c.GetMessage() != tc.message {
				t.Fatalf("cause %s: %s\nwant  %s: %s", c.GetField(), c.GetMessage(), tc.field, tc.message)
			}
		})
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kubectlRefusedFields: `kubectl apply` of a pod with a field podflow
// refuses shows kube-apiserver's 422 naming the field path (issue 16),
// both for a field the proto cannot hold (refused as the body is decoded)
// and for one admission refuses; a deprecated nodeSelector label comes
// back as a Warning.
func kubectlRefusedFields(t *testing.T, k *kubectl) {
	tests := []struct {
		name, spec, want string
	}{
		{"decode", "  resources: {limits: {cpu: 10m}}\n",
			`The Pod "refused" is invalid: spec.resources: Forbidden: podflow does not support pod-level resources`},
		{"admission", "  volumes:\n  - name: d\n    persistentVolumeClaim: {claimName: data}\n",
			`The Pod "refused" is invalid: spec.volumes[0].persistentVolumeClaim: Forbidden: podflow does not support PersistentVolumeClaims`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "refused.yaml")
			manifest := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: refused\nspec:\n" + tc.spec + "  containers:\n  - name: c\n    image: nginx\n"
			if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
				t.Fatal(err)
			}
			_, errs, code := k.run("apply", "-f", f)
			if code == 0 || !strings.Contains(errs, tc.want) {
				t.Fatalf("apply: exit %d %s, want %q", code, errs, tc.want)
			}
		})
	}
	t.Run("warning", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "warned.yaml")
		manifest := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: warned\nspec:\n  nodeSelector: {beta.kubernetes.io/os: linux}\n  containers:\n  - name: c\n    image: nginx\n"
		if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errs, code := k.run("apply", "--dry-run=server", "-f", f)
		want := `Warning: spec.nodeSelector[beta.kubernetes.io/os]: deprecated since v1.14; use "kubernetes.io/os" instead`
		if code != 0 || !strings.Contains(errs, want) {
			t.Fatalf("apply: exit %d %s, want %q", code, errs, want)
		}
	})
}

// podflowApplyRefusedFields: `podflow apply` (the bus door) refuses a pod
// with a field the proto cannot hold before sending it, and admission
// refuses one the proto holds, each naming the field path (issue 16).
func podflowApplyRefusedFields(t *testing.T, c *cluster) {
	tests := []struct {
		name, spec string
		want       []string
	}{
		{"decode", "  resources: {limits: {cpu: 10m}}\n",
			[]string{`The Pod "refused" is invalid: spec.resources: Forbidden: podflow does not support pod-level resources`}},
		{"admission", "  volumes:\n  - name: d\n    persistentVolumeClaim: {claimName: data}\n",
			[]string{"(Invalid)", "spec.volumes[0].persistentVolumeClaim: Forbidden: podflow does not support PersistentVolumeClaims"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			out, code := c.applyYAML("apiVersion: v1\nkind: Pod\nmetadata:\n  name: refused\n  namespace: default\nspec:\n" + tc.spec + "  containers:\n  - name: c\n    image: nginx\n")
			for _, w := range tc.want {
				if code != 1 || !strings.Contains(out, w) {
					t.Fatalf("exit %d: %s\nwant %q", code, out, w)
				}
			}
		})
	}
}

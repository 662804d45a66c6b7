package nodeagent

import (
	"context"
	"testing"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
)

// TestSubPathExpr is kubelet's subPathExpr: $(VAR) expanded from the
// container's environment only (its env, valueFrom resolved), into a
// subPath; an undefined or empty variable, an absolute or escaping result
// is CreateContainerConfigError with kubelet's message.
func TestSubPathExpr(t *testing.T) {
	w := downwardWorker(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "web-0", Namespace: "shop", Uid: "u"},
		Spec: &corev1.PodSpec{NodeName: "n1"}})
	w.d.volumes = nil
	for _, tc := range []struct {
		expr, want, err string
	}{
		{expr: "$(POD_NAME)/logs", want: "web-0/logs"},
		{expr: "data/$(POD_NAME)-$(KIND)", want: "data/web-0-db"},
		{expr: "$$(POD_NAME)", want: "$(POD_NAME)"}, // escaped: not a reference
		{expr: "$(NOPE)/x", err: "missing value for NOPE"},
		{expr: "$(EMPTY)$(NOPE)", err: "missing value for EMPTY, NOPE"},
		{expr: "$(HOME)", err: "missing value for HOME"}, // the image's environment is not the container's
		{expr: "$(ABS)", err: "error SubPath `/etc` must not be an absolute path"},
		{expr: "a/$(UP)/b", err: "unable to provision SubPath `a/../b`: must not contain '..'"},
	} {
		c := &corev1.Container{Name: "c", Env: []*corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "KIND", Value: "db"}, {Name: "EMPTY"}, {Name: "ABS", Value: "/etc"}, {Name: "UP", Value: ".."},
		}, VolumeMounts: []*corev1.VolumeMount{{Name: "v", MountPath: "/v", SubPathExpr: tc.expr}}}
		got, err := w.containerConfig(context.Background(), c)
		if tc.err != "" {
			if CodeOf(err, "") != CodeCreateContainerConfig || message(err) != tc.err {
				t.Errorf("%q: %v, want CreateContainerConfigError %q", tc.expr, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		if vm := got.GetVolumeMounts()[0]; vm.GetSubPath() != tc.want || vm.GetSubPathExpr() != "" {
			t.Errorf("%q: subPath %q (expr %q), want %q", tc.expr, vm.GetSubPath(), vm.GetSubPathExpr(), tc.want)
		}
		if c.GetVolumeMounts()[0].GetSubPathExpr() != tc.expr {
			t.Errorf("%q: the pod's spec was changed", tc.expr)
		}
	}
}

// TestContainerConfigAsIs: a container with nothing to resolve is its
// own configuration (no copy for the runtime to keep); one with
// variables, a $ to expand or a subPathExpr gets a resolved copy, and
// is left as it was.
func TestContainerConfigAsIs(t *testing.T) {
	w := downwardWorker(&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "web-0", Namespace: "shop", Uid: "u"},
		Spec: &corev1.PodSpec{NodeName: "n1"}})
	w.d.volumes = nil
	mounts := []*corev1.VolumeMount{{Name: "v", MountPath: "/v"}}
	for _, tc := range []struct {
		name string
		c    *corev1.Container
		same bool
	}{
		{"nothing to resolve", &corev1.Container{Name: "c", Image: "app:1", Command: []string{"/app", "--port=80"}, VolumeMounts: mounts}, true},
		{"a variable", &corev1.Container{Name: "c", Env: []*corev1.EnvVar{{Name: "KIND", Value: "db"}}}, false},
		{"an escaped $", &corev1.Container{Name: "c", Args: []string{"$$HOME"}}, false},
		{"a subPathExpr", &corev1.Container{Name: "c", Env: nil, VolumeMounts: []*corev1.VolumeMount{{Name: "v", MountPath: "/v", SubPathExpr: "x"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := vt.Clone(tc.c)
			got, err := w.containerConfig(context.Background(), tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if (got == tc.c) != tc.same {
				t.Errorf("configuration is the container itself: %v, want %v", got == tc.c, tc.same)
			}
			if !vt.Equal(tc.c, before) {
				t.Errorf("the container was modified: %v, was %v", tc.c, before)
			}
			if tc.name == "an escaped $" && got.GetArgs()[0] != "$HOME" {
				t.Errorf("args %q, want [$HOME]", got.GetArgs())
			}
		})
	}
}

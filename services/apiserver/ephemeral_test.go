package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// TestEphemeralContainers drives pods/ephemeralcontainers with client-go
// as kubectl debug does (a strategic merge patch of the pod, then reads):
// containers are added, never changed or removed, nothing else of the pod
// changes, the fields ephemeral containers may not have are refused as
// kube-apiserver refuses them, and RBAC is on the subresource.
func TestEphemeralContainers(t *testing.T) {
	t.Parallel()
	s, cfg, cs := startExecSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pods := cs.CoreV1().Pods("default")
	patch := func(t *testing.T, cs *kubernetes.Clientset, ecs ...k8scorev1.EphemeralContainer) (*k8scorev1.Pod, error) {
		t.Helper()
		b, err := json.Marshal(map[string]any{"spec": map[string]any{"ephemeralContainers": ecs}})
		if err != nil {
			t.Fatal(err)
		}
		return cs.CoreV1().Pods("default").Patch(ctx, "web", types.StrategicMergePatchType, b, metav1.PatchOptions{}, "ephemeralcontainers")
	}
	debugger := k8scorev1.EphemeralContainer{EphemeralContainerCommon: k8scorev1.EphemeralContainerCommon{
		Name: "debugger", Image: "busybox", Stdin: true, TTY: true, TerminationMessagePolicy: "File", ImagePullPolicy: "IfNotPresent"},
		TargetContainerName: "c"}
	before, err := pods.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := patch(t, cs, debugger)
	if err != nil {
		t.Fatalf("add: %v", err)
	}
	if ecs := pod.Spec.EphemeralContainers; len(ecs) != 1 || ecs[0].Name != "debugger" || ecs[0].TargetContainerName != "c" || !ecs[0].TTY {
		t.Fatalf("ephemeral containers after the patch: %+v", ecs)
	}
	// The spec changed: the generation goes up by one, as kube's
	// updatePodGeneration (conformance: "Ephemeral Containers will start
	// an ephemeral container in an existing pod" expects 1 then 2).
	if pod.Generation != before.Generation+1 {
		t.Errorf("generation %d after adding an ephemeral container, want %d", pod.Generation, before.Generation+1)
	}
	got, err := pods.Get(ctx, "web", metav1.GetOptions{})
	if err != nil || len(got.Spec.EphemeralContainers) != 1 || len(got.Spec.Containers) != 1 {
		t.Fatalf("the stored pod: %v %+v", err, got)
	}
	// A PUT of the subresource with a second one, and a label, which is
	// not the subresource's to change.
	got.Spec.EphemeralContainers = append(got.Spec.EphemeralContainers, k8scorev1.EphemeralContainer{EphemeralContainerCommon: k8scorev1.EphemeralContainerCommon{
		Name: "second", Image: "busybox", TerminationMessagePolicy: "File", ImagePullPolicy: "IfNotPresent"}})
	got.Labels = map[string]string{"sneaked": "in"}
	if pod, err = pods.UpdateEphemeralContainers(ctx, "web", got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	if len(pod.Spec.EphemeralContainers) != 2 || pod.Labels["sneaked"] != "" || pod.Generation != before.Generation+2 {
		t.Fatalf("after the update: %d ephemeral containers, labels %v, generation %d", len(pod.Spec.EphemeralContainers), pod.Labels, pod.Generation)
	}

	for _, tc := range []struct {
		name   string
		ec     func(*k8scorev1.EphemeralContainer)
		remove bool
		first  bool // the new one before the existing ones
		want   string
	}{
		{name: "ports", ec: func(c *k8scorev1.EphemeralContainer) { c.Ports = []k8scorev1.ContainerPort{{ContainerPort: 80}} },
			want: "spec.ephemeralContainers[2].ports: Forbidden: cannot be set for an Ephemeral Container"},
		{name: "probe", ec: func(c *k8scorev1.EphemeralContainer) {
			c.ReadinessProbe = &k8scorev1.Probe{ProbeHandler: k8scorev1.ProbeHandler{Exec: &k8scorev1.ExecAction{Command: []string{"true"}}}}
		}, want: "spec.ephemeralContainers[2].readinessProbe: Forbidden: cannot be set for an Ephemeral Container"},
		{name: "resources", ec: func(c *k8scorev1.EphemeralContainer) {
			c.Resources.Limits = k8scorev1.ResourceList{"cpu": resource.MustParse("1")}
		}, want: "spec.ephemeralContainers[2].resources: Forbidden: cannot be set for an Ephemeral Container"},
		{name: "what podflow refuses in any container", ec: func(c *k8scorev1.EphemeralContainer) {
			c.SecurityContext = &k8scorev1.SecurityContext{AppArmorProfile: &k8scorev1.AppArmorProfile{Type: "RuntimeDefault"}}
		}, want: "appArmorProfile"},
		{name: "a host port", ec: func(c *k8scorev1.EphemeralContainer) {
			c.Ports = []k8scorev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
		},
			want: "spec.ephemeralContainers[2].ports: Forbidden: cannot be set for an Ephemeral Container"},
		{name: "no name", ec: func(c *k8scorev1.EphemeralContainer) { c.Name = "" }, want: "spec.ephemeralContainers[2].name: Required value"},
		{name: "subPathExpr", ec: func(c *k8scorev1.EphemeralContainer) {
			c.VolumeMounts = []k8scorev1.VolumeMount{{Name: "v", MountPath: "/v", SubPathExpr: "$(POD)"}}
		}, want: "spec.ephemeralContainers[2].volumeMounts[0].subPathExpr: Forbidden: cannot be set for an Ephemeral Container"},
		{name: "no image", ec: func(c *k8scorev1.EphemeralContainer) { c.Image = "" }, want: "spec.ephemeralContainers[2].image: Required value"},
		{name: "liveness probe", ec: func(c *k8scorev1.EphemeralContainer) {
			c.LivenessProbe = &k8scorev1.Probe{ProbeHandler: k8scorev1.ProbeHandler{Exec: &k8scorev1.ExecAction{Command: []string{"true"}}}}
		}, want: "spec.ephemeralContainers[2].livenessProbe: Forbidden: cannot be set for an Ephemeral Container"},
		{name: "startup probe", ec: func(c *k8scorev1.EphemeralContainer) {
			c.StartupProbe = &k8scorev1.Probe{ProbeHandler: k8scorev1.ProbeHandler{Exec: &k8scorev1.ExecAction{Command: []string{"true"}}}}
		}, want: "spec.ephemeralContainers[2].startupProbe: Forbidden: cannot be set for an Ephemeral Container"},
		{name: "lifecycle", ec: func(c *k8scorev1.EphemeralContainer) {
			c.Lifecycle = &k8scorev1.Lifecycle{PreStop: &k8scorev1.LifecycleHandler{Exec: &k8scorev1.ExecAction{Command: []string{"true"}}}}
		}, want: "spec.ephemeralContainers[2].lifecycle: Forbidden: cannot be set for an Ephemeral Container"},
		{name: "restart policy", ec: func(c *k8scorev1.EphemeralContainer) {
			always := k8scorev1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}, want: "spec.ephemeralContainers[2].restartPolicy: Forbidden: cannot be set for an Ephemeral Container"},
		{name: "a container's name", ec: func(c *k8scorev1.EphemeralContainer) { c.Name = "c" }, want: `spec.ephemeralContainers[2].name: Duplicate value: "c"`},
		{name: "an unknown target", ec: func(c *k8scorev1.EphemeralContainer) { c.TargetContainerName = "nope" }, want: `spec.ephemeralContainers[2].targetContainerName: Not found: "nope"`},
		{name: "changed", ec: func(c *k8scorev1.EphemeralContainer) { c.Name = "debugger"; c.Image = "other" }, want: `existing ephemeral containers "debugger" may not be changed`},
		{name: "ports on a new one placed first", first: true, ec: func(c *k8scorev1.EphemeralContainer) { c.Ports = []k8scorev1.ContainerPort{{ContainerPort: 80}} },
			want: "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container"},
		{name: "removed", remove: true, want: `existing ephemeral containers "second" may not be removed`},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			cur := &k8scorev1.Pod{}
			if err := cs.CoreV1().RESTClient().Get().Namespace("default").Resource("pods").Name("web").SubResource("ephemeralcontainers").Do(ctx).Into(cur); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.remove:
				cur.Spec.EphemeralContainers = cur.Spec.EphemeralContainers[:1]
			case tc.name == "changed":
				tc.ec(&cur.Spec.EphemeralContainers[0])
			default:
				ec := k8scorev1.EphemeralContainer{EphemeralContainerCommon: k8scorev1.EphemeralContainerCommon{
					Name: "third", Image: "busybox", TerminationMessagePolicy: "File", ImagePullPolicy: "IfNotPresent"}}
				tc.ec(&ec)
				if tc.first {
					cur.Spec.EphemeralContainers = append([]k8scorev1.EphemeralContainer{ec}, cur.Spec.EphemeralContainers...)
				} else {
					cur.Spec.EphemeralContainers = append(cur.Spec.EphemeralContainers, ec)
				}
			}
			_, err = pods.UpdateEphemeralContainers(ctx, "web", cur, metav1.UpdateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want 422 with %q", err, tc.want)
			}
		})
	}

	// A pod update may not touch ephemeral containers; a create may not
	// set them.
	got, err = pods.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.EphemeralContainers = got.Spec.EphemeralContainers[:1]
	if _, err := pods.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("pod update removing an ephemeral container: %v, want 422", err)
	}
	fresh := &k8scorev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}, Spec: k8scorev1.PodSpec{
		Containers:          []k8scorev1.Container{{Name: "c", Image: "busybox"}},
		EphemeralContainers: []k8scorev1.EphemeralContainer{debugger}}}
	if _, err := pods.Create(ctx, fresh, metav1.CreateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "spec.ephemeralContainers: Forbidden: cannot be set on create") {
		t.Errorf("create with ephemeral containers: %v, want 422", err)
	}

	// RBAC: patch pods is not patch pods/ephemeralcontainers.
	_, acs := aliceMay(t, ctx, s, cfg, "pod-editor", "get", "patch", "update")
	third := debugger
	third.Name = "third"
	if _, err := patch(t, acs, third); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"pods/ephemeralcontainers"`) {
		t.Errorf("alice's patch: %v, want 403 on pods/ephemeralcontainers", err)
	}
}

// TestEphemeralContainersManagedFields: a write through
// pods/ephemeralcontainers (kubectl debug's strategic merge patch, a PUT
// of the subresource, a server-side apply of it) of a pod created through
// the API records its manager as kube-apiserver does — an Update (Apply)
// entry with subresource "ephemeralcontainers" owning the containers it
// added, and nothing of what the subresource ignores (a label sent
// along); the creator's entry and the main resource's managers stay
// apart.
func TestEphemeralContainersManagedFields(t *testing.T) {
	t.Parallel()
	_, _, cs := startExecSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pods := cs.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, &k8scorev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "dbg"},
		Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{FieldManager: "creator"}); err != nil {
		t.Fatalf("create: %v", err)
	}
	entry := func(t *testing.T, pod *k8scorev1.Pod, manager string) metav1.ManagedFieldsEntry {
		t.Helper()
		for _, e := range pod.ManagedFields {
			if e.Manager == manager {
				return e
			}
		}
		t.Fatalf("no managedFields entry of %q: %+v", manager, pod.ManagedFields)
		return metav1.ManagedFieldsEntry{}
	}
	owns := func(e metav1.ManagedFieldsEntry, name string) bool {
		return e.FieldsV1 != nil && strings.Contains(string(e.FieldsV1.Raw), `"f:ephemeralContainers":{`) &&
			strings.Contains(string(e.FieldsV1.Raw), `"k:{\"name\":\"`+name+`\"}"`)
	}

	b, err := json.Marshal(map[string]any{"spec": map[string]any{"ephemeralContainers": []k8scorev1.EphemeralContainer{{
		EphemeralContainerCommon: k8scorev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox", Stdin: true, TTY: true,
			TerminationMessagePolicy: "File", ImagePullPolicy: "IfNotPresent"}, TargetContainerName: "c"}}}})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := pods.Patch(ctx, "dbg", types.StrategicMergePatchType, b, metav1.PatchOptions{FieldManager: "kubectl-debug"}, "ephemeralcontainers")
	if err != nil {
		t.Fatalf("patch: %v", err)
	}
	stored, err := pods.Get(ctx, "dbg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for what, p := range map[string]*k8scorev1.Pod{"the patch's answer": pod, "the stored pod": stored} {
		e := entry(t, p, "kubectl-debug")
		if e.Subresource != "ephemeralcontainers" || e.Operation != metav1.ManagedFieldsOperationUpdate || !owns(e, "debugger") {
			t.Errorf("%s: kubectl-debug's entry %+v, fields %s", what, e, e.FieldsV1)
		}
	}
	rv := pod.ResourceVersion

	// The same patch again adds nothing: nothing is written.
	if again, err := pods.Patch(ctx, "dbg", types.StrategicMergePatchType, b, metav1.PatchOptions{FieldManager: "kubectl-debug"}, "ephemeralcontainers"); err != nil || again.ResourceVersion != rv {
		t.Errorf("an unchanged patch: %v, resourceVersion %s, want %s", err, again.GetResourceVersion(), rv)
	}

	// A PUT of the subresource by another manager, with a label the
	// subresource ignores: that manager owns the container it added, not
	// the label.
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, k8scorev1.EphemeralContainer{EphemeralContainerCommon: k8scorev1.EphemeralContainerCommon{
		Name: "second", Image: "busybox", TerminationMessagePolicy: "File", ImagePullPolicy: "IfNotPresent"}})
	pod.Labels = map[string]string{"sneaked": "in"}
	if pod, err = pods.UpdateEphemeralContainers(ctx, "dbg", pod, metav1.UpdateOptions{FieldManager: "debug-put"}); err != nil {
		t.Fatalf("update: %v", err)
	}
	e := entry(t, pod, "debug-put")
	if e.Subresource != "ephemeralcontainers" || e.Operation != metav1.ManagedFieldsOperationUpdate || !owns(e, "second") ||
		strings.Contains(string(e.FieldsV1.Raw), "sneaked") {
		t.Errorf("debug-put's entry %+v, fields %s", e, e.FieldsV1)
	}
	if d := entry(t, pod, "kubectl-debug"); !owns(d, "debugger") {
		t.Errorf("kubectl-debug's entry after another manager's write: fields %s", d.FieldsV1)
	}
	if c := entry(t, pod, "creator"); c.Subresource != "" || c.Operation != metav1.ManagedFieldsOperationUpdate {
		t.Errorf("the creator's entry: %+v", c)
	}

	// A server-side apply through the subresource: an Apply entry of the
	// subresource, owning what it applied.
	applied := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"dbg"},"spec":{"ephemeralContainers":[` +
		`{"name":"third","image":"busybox","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}]}}`
	if pod, err = pods.Patch(ctx, "dbg", types.ApplyPatchType, []byte(applied), metav1.PatchOptions{FieldManager: "applier"}, "ephemeralcontainers"); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if a := entry(t, pod, "applier"); a.Subresource != "ephemeralcontainers" || a.Operation != metav1.ManagedFieldsOperationApply || !owns(a, "third") {
		t.Errorf("applier's entry %+v, fields %s", a, a.FieldsV1)
	}
	if len(pod.Spec.EphemeralContainers) != 3 {
		t.Errorf("after the apply: %d ephemeral containers, want 3", len(pod.Spec.EphemeralContainers))
	}

	// A label set through the pod itself, by the same manager name: an
	// entry of the main resource, apart from the subresource's.
	pod.Labels = map[string]string{"app": "dbg"}
	if pod, err = pods.Update(ctx, pod, metav1.UpdateOptions{FieldManager: "kubectl-debug"}); err != nil {
		t.Fatalf("pod update: %v", err)
	}
	var main, sub int
	for _, e := range pod.ManagedFields {
		switch {
		case e.Manager != "kubectl-debug":
		case e.Subresource == "":
			main++
		case e.Subresource == "ephemeralcontainers":
			sub++
		}
	}
	if main != 1 || sub != 1 {
		t.Errorf("kubectl-debug's entries: %d of the pod, %d of the subresource, want one each: %+v", main, sub, pod.ManagedFields)
	}
}

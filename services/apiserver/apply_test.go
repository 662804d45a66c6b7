package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
)

// stockKubectl runs the kubectl on the PATH against s as the admin.
type stockKubectl struct {
	t    *testing.T
	path string
	args []string
	home string
}

func newStockKubectl(t *testing.T, s *system) *stockKubectl {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on the PATH: the server-side apply tests drive the stock kubectl (v1.32)")
	}
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	writeFile(t, ca, s.ca.CertPEM)
	return &stockKubectl{t: t, path: p, home: dir, args: []string{"--server", s.url, "--token", adminToken,
		"--certificate-authority", ca, "--cache-dir", filepath.Join(dir, "cache"), "--request-timeout", "30s", "-n", "default"}}
}

// run returns kubectl's stdout, stderr and exit code; stdin is fed from in.
func (k *stockKubectl) run(in string, args ...string) (string, string, int) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.path, append(append([]string{}, k.args...), args...)...)
	cmd.Env = append(os.Environ(), "HOME="+k.home, "KUBECONFIG="+filepath.Join(k.home, "none"))
	cmd.Stdin = strings.NewReader(in)
	var out, errs strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		k.t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errs.String(), code
}

func (k *stockKubectl) must(in string, args ...string) string {
	k.t.Helper()
	out, errs, code := k.run(in, args...)
	if code != 0 {
		k.t.Fatalf("kubectl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// managers is "manager/operation" of each managedFields entry.
func managers(obj map[string]any) []string {
	var out []string
	l, _ := path(obj, "metadata.managedFields").([]any)
	for _, e := range l {
		m, _ := e.(map[string]any)
		out = append(out, m["manager"].(string)+"/"+m["operation"].(string))
	}
	return out
}

// TestServerSideApplyKubectl drives server-side apply with the stock
// kubectl: two field managers conflict over a field (409 naming it and
// its owner) until one forces; re-applying an unchanged ConfigMap or Pod
// writes nothing (same resourceVersion); managedFields are served.
func TestServerSideApplyKubectl(t *testing.T) {
	s := startSystem(t, options{})
	k := newStockKubectl(t, s)
	admin := s.client(t, adminToken)
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  level: %s\n"
	cmURL := s.url + "/api/v1/namespaces/default/configmaps/settings"

	if out := k.must(strings.Replace(cm, "%s", "one", 1), "apply", "--server-side", "--field-manager=alice", "-f", "-"); !strings.Contains(out, "configmap/settings serverside-applied") {
		t.Fatalf("apply: %q", out)
	}
	code, obj, _ := do(t, admin, "GET", cmURL, "", "")
	if code != 200 || strings.Join(managers(obj), ",") != "alice/Apply" || path(obj, "metadata.managedFields") == nil {
		t.Fatalf("GET after apply: %d managers %v\n%v", code, managers(obj), obj)
	}
	fields, _ := path(obj, "metadata.managedFields").([]any)
	if f := path(fields[0].(map[string]any), "fieldsV1.f:data.f:level"); f == nil {
		t.Errorf("alice's fieldsV1 does not own data.level: %v", fields[0])
	}
	rv := path(obj, "metadata.resourceVersion")

	t.Run("unchanged re-apply is a no-op", func(t *testing.T) {
		k.must(strings.Replace(cm, "%s", "one", 1), "apply", "--server-side", "--field-manager=alice", "-f", "-")
		_, again, _ := do(t, admin, "GET", cmURL, "", "")
		if got := path(again, "metadata.resourceVersion"); got != rv {
			t.Errorf("resourceVersion %v after an unchanged re-apply, want %v", got, rv)
		}
	})

	t.Run("conflict", func(t *testing.T) {
		out, errs, code := k.run(strings.Replace(cm, "%s", "two", 1), "apply", "--server-side", "--field-manager=bob", "-f", "-")
		if code == 0 || !strings.Contains(errs, `conflict with "alice"`) || !strings.Contains(errs, ".data.level") {
			t.Fatalf("bob's conflicting apply: exit %d\n%s%s", code, out, errs)
		}
		code, body, _ := do(t, admin, "PATCH", cmURL+"?fieldManager=bob", "application/apply-patch+yaml", strings.Replace(cm, "%s", "two", 1))
		causes, _ := path(body, "details.causes").([]any)
		if code != 409 || path(body, "reason") != "Conflict" || len(causes) != 1 ||
			path(causes[0].(map[string]any), "field") != ".data.level" || path(causes[0].(map[string]any), "reason") != "FieldManagerConflict" ||
			!strings.Contains(path(causes[0].(map[string]any), "message").(string), `"alice"`) {
			t.Fatalf("conflicting apply over HTTPS: %d %v", code, body)
		}
		_, now, _ := do(t, admin, "GET", cmURL, "", "")
		if path(now, "data.level") != "one" {
			t.Fatalf("a refused apply changed the object: %v", now)
		}
	})

	t.Run("force takes ownership", func(t *testing.T) {
		k.must(strings.Replace(cm, "%s", "two", 1), "apply", "--server-side", "--field-manager=bob", "--force-conflicts", "-f", "-")
		_, now, _ := do(t, admin, "GET", cmURL, "", "")
		if path(now, "data.level") != "two" || strings.Join(managers(now), ",") != "bob/Apply" {
			t.Fatalf("after bob forced: level %v managers %v", path(now, "data.level"), managers(now))
		}
		// alice no longer owns level: her apply of the old value conflicts
		// with bob now.
		_, errs, code := k.run(strings.Replace(cm, "%s", "one", 1), "apply", "--server-side", "--field-manager=alice", "-f", "-")
		if code == 0 || !strings.Contains(errs, `conflict with "bob"`) {
			t.Fatalf("alice after bob forced: exit %d %s", code, errs)
		}
	})

	t.Run("get -o yaml shows managedFields", func(t *testing.T) {
		out := k.must("", "get", "configmap", "settings", "-o", "yaml", "--show-managed-fields")
		if !strings.Contains(out, "managedFields:") || !strings.Contains(out, "manager: bob") || !strings.Contains(out, "operation: Apply") {
			t.Fatalf("get -o yaml:\n%s", out)
		}
	})

	t.Run("updates record their manager", func(t *testing.T) {
		k.must("", "label", "configmap", "settings", "team=x")
		_, now, _ := do(t, admin, "GET", cmURL, "", "")
		if got := strings.Join(managers(now), ","); got != "bob/Apply,kubectl-label/Update" {
			t.Fatalf("after kubectl label: managers %s", got)
		}
		code, now, _ := do(t, admin, "PATCH", cmURL, "application/merge-patch+json", `{"data":{"other":"y"}}`, "User-Agent", "mytool/1.0 (linux)")
		if code != 200 || !strings.Contains(strings.Join(managers(now), ","), "mytool/Update") {
			t.Fatalf("merge patch with User-Agent mytool/1.0: %d managers %v", code, managers(now))
		}
	})

	t.Run("unchanged pod re-apply", func(t *testing.T) {
		pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {app: web}\nspec:\n  containers:\n  - name: c\n    image: nginx\n"
		k.must(pod, "apply", "--server-side", "--field-manager=alice", "-f", "-")
		podURL := s.url + "/api/v1/namespaces/default/pods/web"
		_, p1, _ := do(t, admin, "GET", podURL, "", "")
		if !strings.Contains(strings.Join(managers(p1), ","), "alice/Apply") {
			t.Fatalf("the applied pod's managers: %v", managers(p1))
		}
		out := k.must(pod, "apply", "--server-side", "--field-manager=alice", "-f", "-")
		if !strings.Contains(out, "pod/web serverside-applied") {
			t.Fatalf("re-apply: %q", out)
		}
		_, p2, _ := do(t, admin, "GET", podURL, "", "")
		if path(p2, "metadata.resourceVersion") != path(p1, "metadata.resourceVersion") {
			t.Errorf("resourceVersion %v after an unchanged pod re-apply, want %v", path(p2, "metadata.resourceVersion"), path(p1, "metadata.resourceVersion"))
		}
		// A change Kubernetes allows on a pod (a label) goes through apply.
		k.must(strings.Replace(pod, "app: web", "app: web, tier: front", 1), "apply", "--server-side", "--field-manager=alice", "-f", "-")
		_, p3, _ := do(t, admin, "GET", podURL, "", "")
		if path(p3, "metadata.labels.tier") != "front" {
			t.Errorf("labels after applying tier: %v", path(p3, "metadata.labels"))
		}
	})
}

// TestServerSideApplyNewerFields: fields newer than the embedded OpenAPI
// documents (a native sidecar's restartPolicy) are typed too, so a pod
// using them gets its managedFields, and a second manager's apply of one
// conflicts by name.
func TestServerSideApplyNewerFields(t *testing.T) {
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	u := s.url + "/api/v1/namespaces/default/pods/side"
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"side"},"spec":{
		"initContainers":[{"name":"proxy","image":"busybox","restartPolicy":"Always"}],
		"containers":[{"name":"app","image":"busybox"}]}}`
	code, obj, _ := do(t, admin, "PATCH", u+"?fieldManager=alice", "application/apply-patch+yaml", pod)
	if code != 201 {
		t.Fatalf("apply of a pod with a sidecar: %d %v", code, obj)
	}
	fields, _ := json.Marshal(path(obj, "metadata.managedFields"))
	if !strings.Contains(string(fields), `"f:restartPolicy"`) || !strings.Contains(string(fields), `"k:{\"name\":\"proxy\"}"`) {
		t.Fatalf("managedFields do not own the sidecar's restartPolicy: %s", fields)
	}
	other := strings.Replace(pod, `"restartPolicy":"Always"`, `"restartPolicy":"Never"`, 1)
	code, body, _ := do(t, admin, "PATCH", u+"?fieldManager=bob", "application/apply-patch+yaml", other)
	if code != 409 || !strings.Contains(fmt.Sprint(path(body, "message")), "restartPolicy") {
		t.Fatalf("bob applying another restartPolicy: %d %v, want 409 naming restartPolicy", code, body)
	}
}

// TestServerSideApplyRefusals: an apply names its field manager (422, as
// kube-apiserver's PatchOptions validation), a manager name is bounded,
// force is for applies only, and managedFields may not be sent in an
// applied configuration.
func TestServerSideApplyRefusals(t *testing.T) {
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	u := s.url + "/api/v1/namespaces/default/configmaps/c"
	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"b"}}`
	for _, c := range []struct {
		name, query, ct, body string
		code                  int
		want                  string
	}{
		{"no field manager", "", "application/apply-patch+yaml", cm, 422, "fieldManager: Required value: is required for apply patch"},
		{"manager too long", "?fieldManager=" + strings.Repeat("m", 129), "application/apply-patch+yaml", cm, 422, "fieldManager: Too long"},
		{"manager with a control character", "?fieldManager=a%01b", "application/apply-patch+yaml", cm, 422, "must only contain printable characters"},
		{"force on a merge patch", "?force=true", "application/merge-patch+json", `{"data":{"a":"c"}}`, 422, "force: Forbidden"},
		{"managedFields in the applied object", "?fieldManager=x", "application/apply-patch+yaml",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","managedFields":[{"manager":"x","operation":"Apply"}]}}`, 400, "managedFields must be nil"},
		{"wrong kind", "?fieldManager=x", "application/apply-patch+yaml", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"c"}}`, 400, "ConfigMap expected"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body, _ := do(t, admin, "PATCH", u+c.query, c.ct, c.body)
			if code != c.code || !strings.Contains(path(body, "message").(string), c.want) {
				t.Fatalf("%d %v, want %d %q", code, body, c.code, c.want)
			}
		})
	}
	if code, body, _ := do(t, admin, "GET", u, "", ""); code != 404 {
		t.Fatalf("a refused apply created the object: %d %v", code, body)
	}
}

// TestServerSideApplyClientGo applies typed ApplyConfigurations with
// client-go: the apply creates the object, a second manager's apply of an
// owned field is a Conflict, Force takes it over.
func TestServerSideApplyClientGo(t *testing.T) {
	s := startSystem(t, options{})
	cs := s.adminClientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cms := cs.CoreV1().ConfigMaps("default")
	got, err := cms.Apply(ctx, applycorev1.ConfigMap("cg", "default").WithData(map[string]string{"k": "1"}), metav1.ApplyOptions{FieldManager: "ctrl-a"})
	if err != nil {
		t.Fatalf("apply (create): %v", err)
	}
	if got.Data["k"] != "1" || len(got.ManagedFields) != 1 || got.ManagedFields[0].Manager != "ctrl-a" || got.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Fatalf("created: data %v managedFields %+v", got.Data, got.ManagedFields)
	}
	again, err := cms.Apply(ctx, applycorev1.ConfigMap("cg", "default").WithData(map[string]string{"k": "1"}), metav1.ApplyOptions{FieldManager: "ctrl-a"})
	if err != nil || again.ResourceVersion != got.ResourceVersion {
		t.Fatalf("unchanged re-apply: %v, resourceVersion %s want %s", err, again.ResourceVersion, got.ResourceVersion)
	}
	_, err = cms.Apply(ctx, applycorev1.ConfigMap("cg", "default").WithData(map[string]string{"k": "2"}), metav1.ApplyOptions{FieldManager: "ctrl-b"})
	if !apierrors.IsConflict(err) {
		t.Fatalf("ctrl-b's apply of k: %v, want a Conflict", err)
	}
	if st, ok := err.(apierrors.APIStatus); !ok || st.Status().Details == nil || len(st.Status().Details.Causes) != 1 ||
		st.Status().Details.Causes[0].Field != ".data.k" {
		t.Fatalf("conflict details: %#v", err)
	}
	// Both managers applying the same value share the field.
	shared, err := cms.Apply(ctx, applycorev1.ConfigMap("cg", "default").WithData(map[string]string{"k": "1"}), metav1.ApplyOptions{FieldManager: "ctrl-b"})
	if err != nil || len(shared.ManagedFields) != 2 {
		t.Fatalf("ctrl-b applying the same value: %v, managedFields %+v", err, shared.ManagedFields)
	}
	forced, err := cms.Apply(ctx, applycorev1.ConfigMap("cg", "default").WithData(map[string]string{"k": "3"}), metav1.ApplyOptions{FieldManager: "ctrl-b", Force: true})
	if err != nil || forced.Data["k"] != "3" {
		t.Fatalf("forced apply: %v %v", err, forced.Data)
	}
	for _, m := range forced.ManagedFields {
		if m.Manager == "ctrl-a" {
			t.Errorf("ctrl-a still manages a field after ctrl-b forced: %+v", forced.ManagedFields)
		}
	}
}

// TestServerSideApplyOwnKind: client-go has no field schema of
// apiextensions.k8s.io's kinds: an apply of a CustomResourceDefinition is
// a JSON merge patch, recording no managedFields, and still names its
// manager.
func TestServerSideApplyOwnKind(t *testing.T) {
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	u := s.url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/tabs.example.com"
	crd := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"tabs.example.com"},"spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"tabs","kind":"Tab","shortNames":["%s"]},"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`
	if code, body, _ := do(t, admin, "PATCH", u+"?fieldManager=a", "application/apply-patch+yaml", strings.Replace(crd, "%s", "ta", 1)); code != 201 || path(body, "metadata.managedFields") != nil {
		t.Fatalf("apply (create): %d %v", code, body)
	}
	if code, body, _ := do(t, admin, "PATCH", u+"?fieldManager=b", "application/apply-patch+yaml", strings.Replace(crd, "%s", "tb", 1)); code != 200 || fmt.Sprint(path(body, "spec.names.shortNames")) != "[tb]" {
		t.Fatalf("apply (update): %d %v", code, body)
	}
	if code, _, _ := do(t, admin, "PATCH", u, "application/apply-patch+yaml", strings.Replace(crd, "%s", "tc", 1)); code != 422 {
		t.Fatalf("apply without a field manager: %d, want 422", code)
	}
}

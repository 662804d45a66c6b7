package client

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

func testPods(n int) []objects.Object {
	all := []objects.Object{
		&corev1.Pod{
			Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
			Spec: &corev1.PodSpec{NodeName: "sim-node-1", Containers: []*corev1.Container{
				{Name: "nginx", Image: "nginx", Ports: []*corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 443}}},
				{Name: "log", Image: "busybox"},
			}},
			Status: &corev1.PodStatus{Phase: "Running", PodIp: "10.244.1.5"},
		},
		&corev1.Pod{
			Metadata: &corev1.ObjectMeta{Name: "db", Namespace: "default"},
			Spec:     &corev1.PodSpec{Containers: []*corev1.Container{{Name: "pg", Image: "postgres\x1b[31m"}}},
			Status:   &corev1.PodStatus{Phase: "Pending"},
		},
		&corev1.Pod{
			Metadata: &corev1.ObjectMeta{Name: "job", Namespace: "other"},
			Spec:     &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "busybox"}}},
		},
	}
	return all[:n]
}

func render(t *testing.T, output string, objs []objects.Object, list bool) string {
	t.Helper()
	var b bytes.Buffer
	p, err := NewPrinter(&b, output, false)
	if err != nil {
		t.Fatalf("NewPrinter(%q): %v", output, err)
	}
	if err := p.Print(objects.Pods, objs, true, list); err != nil {
		t.Fatalf("print -o %s: %v", output, err)
	}
	return b.String()
}

// TestListOutput: -o json and -o yaml of a list print one List, as kubectl
// does, so `jq .items` finds every object; of one named object, the object.
func TestListOutput(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		for _, format := range []string{"json", "yaml"} {
			t.Run(format, func(t *testing.T) {
				out := render(t, format, testPods(n), true)
				j := []byte(out)
				if format == "yaml" {
					var err error
					if j, err = yaml.YAMLToJSON(j); err != nil {
						t.Fatalf("not one YAML document: %v\n%s", err, out)
					}
				}
				var list struct {
					APIVersion string            `json:"apiVersion"`
					Kind       string            `json:"kind"`
					Items      []json.RawMessage `json:"items"`
					Metadata   map[string]string `json:"metadata"`
				}
				dec := json.NewDecoder(bytes.NewReader(j))
				if err := dec.Decode(&list); err != nil {
					t.Fatalf("not a JSON document: %v\n%s", err, out)
				}
				if dec.More() {
					t.Fatalf("more than one document:\n%s", out)
				}
				if list.APIVersion != "v1" || list.Kind != "List" || len(list.Items) != n || list.Metadata["resourceVersion"] != "" {
					t.Fatalf("want a v1 List of %d items with resourceVersion \"\", got %s", n, out)
				}
				if n == 0 && format == "json" && !strings.Contains(out, `"items": [],`) {
					t.Fatalf("an empty list prints items: [], as kubectl does:\n%s", out)
				}
				for i, it := range list.Items {
					var pod struct {
						Kind     string `json:"kind"`
						Metadata struct {
							Name string `json:"name"`
						} `json:"metadata"`
					}
					if err := json.Unmarshal(it, &pod); err != nil || pod.Kind != "Pod" || pod.Metadata.Name != testPods(n)[i].GetMetadata().GetName() {
						t.Fatalf("item %d: %s (%v)", i, it, err)
					}
				}
			})
		}
	}
	t.Run("one named object", func(t *testing.T) {
		out := render(t, "json", testPods(1), false)
		var pod map[string]any
		if err := json.Unmarshal([]byte(out), &pod); err != nil || pod["kind"] != "Pod" {
			t.Fatalf("get pod web -o json: want the Pod, got %s (%v)", out, err)
		}
	})
}

// TestJSONPathOutput: -o jsonpath applies the template to the List (or the
// one object) in its Kubernetes JSON form, as kubectl's JSONPathPrinter,
// with missing keys allowed.
func TestJSONPathOutput(t *testing.T) {
	for _, tc := range []struct {
		name, template string
		n              int
		list           bool
		want           string
	}{
		{"names", "{.items[*].metadata.name}", 3, true, "web db job"},
		{"range", `{range .items[*]}{.metadata.name}{"\t"}{.status.phase}{"\n"}{end}`, 2, true, "web\tRunning\ndb\tPending\n"},
		{"numbers print as integers", "{.items[0].spec.containers[0].ports[*].containerPort}", 1, true, "80 443"},
		{"filter", `{.items[?(@.status.phase=="Pending")].metadata.name}`, 3, true, "db"},
		{"one object", "{.spec.nodeName}", 1, false, "sim-node-1"},
		{"missing key prints nothing", "{.spec.nodeName}", 3, true, ""},
		{"labels", "{.items[*].metadata.labels.app}", 3, true, "web"},
		{"the List itself", "{.kind} {.apiVersion}", 0, true, "List v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(t, "jsonpath="+tc.template, testPods(tc.n), tc.list); got != tc.want {
				t.Fatalf("-o jsonpath=%s: got %q, want %q", tc.template, got, tc.want)
			}
		})
	}
}

// TestCustomColumnsOutput: kubectl's custom-columns: relaxed field paths,
// several values joined by commas, <none> for none, its tab writer.
func TestCustomColumnsOutput(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		want       string
	}{
		{"relaxed paths", "NAME:.metadata.name,NODE:spec.nodeName,PHASE:{.status.phase},NS:{metadata.namespace}",
			"NAME   NODE         PHASE     NS\n" +
				"web    sim-node-1   Running   default\n" +
				"db     <none>       Pending   default\n" +
				"job    <none>       <none>    other\n"},
		{"several values", "NAME:.metadata.name,IMAGES:.spec.containers[*].image,PORTS:.spec.containers[*].ports[*].containerPort",
			"NAME   IMAGES           PORTS\n" +
				"web    nginx,busybox    80,443\n" +
				"db     postgres^[[31m   <none>\n" +
				"job    busybox          <none>\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(t, "custom-columns="+tc.spec, testPods(3), true); got != tc.want {
				t.Fatalf("-o custom-columns=%s:\ngot\n%s\nwant\n%s", tc.spec, got, tc.want)
			}
		})
	}
}

// TestNameOutput: -o name prints KIND/NAME, one a line.
func TestNameOutput(t *testing.T) {
	if got := render(t, "name", testPods(2), true); got != "pod/web\npod/db\n" {
		t.Fatalf("-o name: %q", got)
	}
}

// TestOutputErrors: kubectl's messages for a bad -o.
func TestOutputErrors(t *testing.T) {
	for _, tc := range []struct{ output, want string }{
		{"xml", `unable to match a Printer suitable for the output format "xml"`},
		{"json=x", `unable to match a Printer suitable for the output format "json=x"`},
		{"jsonpath=", "template format specified but no template given"},
		{"jsonpath={.items[", "error parsing jsonpath"},
		{"custom-columns=", "custom-columns format specified but no custom columns given"},
		{"custom-columns=NAME", "unexpected custom-columns spec: NAME, expected <header>:<json-path-expr>"},
		{"custom-columns=A:{a}{b}", "unexpected path string"},
	} {
		t.Run(tc.output, func(t *testing.T) {
			_, err := NewPrinter(&bytes.Buffer{}, tc.output, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("-o %s: got %v, want %q", tc.output, err, tc.want)
			}
		})
	}
}

// TestManagedFieldsHidden: json, yaml and jsonpath output leave
// metadata.managedFields out unless --show-managed-fields, as kubectl; the
// objects printed are not changed.
func TestManagedFieldsHidden(t *testing.T) {
	pods := testPods(2)
	pods[0].GetMetadata().ManagedFields = []*corev1.ManagedFieldsEntry{{Manager: "kubectl", Operation: "Apply"}}
	for _, output := range []string{"json", "yaml", "jsonpath={.items[*].metadata}"} {
		for _, show := range []bool{false, true} {
			var b bytes.Buffer
			p, err := NewPrinter(&b, output, false)
			if err != nil {
				t.Fatal(err)
			}
			p.ShowManagedFields = show
			if err := p.Print(objects.Pods, pods, true, true); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(b.String(), "managedFields"); got != show {
				t.Errorf("-o %s, --show-managed-fields=%v: managedFields printed %v:\n%s", output, show, got, b.String())
			}
		}
	}
	if len(pods[0].GetMetadata().GetManagedFields()) != 1 {
		t.Error("printing changed the object")
	}
}

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// testPodflowLikeKubectl: the podflow CLI prints what the stock kubectl
// prints for the same objects — a List for -o json, the same jsonpath,
// custom-columns and name output, kubectl's NotFound line and exit code —
// and `podflow store status` finds the system through the client
// configuration, as the README shows it.
func testPodflowLikeKubectl(t *testing.T, c *cluster, k *kubectl) {
	podNames := func(out string) []string {
		t.Helper()
		var list struct {
			Kind  string `json:"kind"`
			Items []struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil || list.Kind != "List" {
			t.Fatalf("want one List document (%v):\n%s", err, out)
		}
		var names []string
		for _, it := range list.Items {
			names = append(names, it.Metadata.Name)
		}
		return names
	}
	t.Run("get -o json is a List", func(t *testing.T) {
		got, want := podNames(c.mustPodflow("get", "pods", "-o", "json")), podNames(k.must("get", "pods", "-o", "json"))
		if len(got) == 0 || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("podflow .items names %v, kubectl's %v", got, want)
		}
	})
	t.Run("get -o yaml is a List", func(t *testing.T) {
		j, err := yaml.YAMLToJSON([]byte(c.mustPodflow("get", "pods", "-o", "yaml")))
		if err != nil {
			t.Fatal(err)
		}
		if got := podNames(string(j)); len(got) == 0 {
			t.Fatalf("no items: %s", j)
		}
	})
	for _, tc := range []struct{ resource, output, has string }{
		{"pods", "jsonpath={.items[*].metadata.name}", "my-nginx-pod"},
		{"pods", `jsonpath={range .items[*]}{.metadata.name}{"\t"}{.spec.nodeName}{"\t"}{.spec.containers[0].image}{"\n"}{end}`, "my-nginx-pod"},
		{"pods", "custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,IMAGES:.spec.containers[*].image,PORTS:spec.containers[*].ports[*].containerPort,MISSING:{.status.nothing}", "my-nginx-pod"},
		{"pods", "name", "pod/my-nginx-pod"},
		{"nodes", "jsonpath={.items[*].metadata.name}", "sim-node-0001 sim-node-0002"},
		{"nodes", "custom-columns=NAME:.metadata.name,CIDR:.spec.podCIDR,ADDRESSES:.status.addresses[*].address", "sim-node-0002"},
	} {
		t.Run(tc.resource+" -o "+tc.output, func(t *testing.T) {
			got, want := c.mustPodflow("get", tc.resource, "-o", tc.output), k.must("get", tc.resource, "-o", tc.output)
			if got != want || !strings.Contains(got, tc.has) {
				t.Fatalf("podflow get %s -o %s:\n%q\nkubectl:\n%q", tc.resource, tc.output, got, want)
			}
		})
	}
	t.Run("get pod x of a missing pod", func(t *testing.T) {
		out, code := c.podflow("get", "pod", "no-such-pod")
		_, kerr, kcode := k.run("get", "pod", "no-such-pod")
		if code != 1 || kcode != 1 || out != kerr || out != "Error from server (NotFound): pods \"no-such-pod\" not found\n" {
			t.Fatalf("podflow: exit %d %q; kubectl: exit %d %q", code, out, kcode, kerr)
		}
	})
	t.Run("events and version", func(t *testing.T) {
		if out := c.mustPodflow("events", "--for", "pod/my-nginx-pod"); !regexpLine(out, "Normal", "Scheduled", "pod/my-nginx-pod") {
			t.Fatalf("podflow events --for pod/my-nginx-pod:\n%s", out)
		}
		if out := c.mustPodflow("events", "--for", "pod/no-such-pod"); strings.Contains(out, "my-nginx-pod") {
			t.Fatalf("podflow events --for pod/no-such-pod lists another pod's events:\n%s", out)
		}
		if out := c.mustPodflow("version"); !strings.Contains(out, "Server Version: podflow") || !regexpLine(out, "api", "api-1") {
			t.Fatalf("podflow version:\n%s", out)
		}
	})
	t.Run("store status", func(t *testing.T) {
		out := c.mustPodflow("store", "status")
		if !strings.Contains(out, "leader store-") || !regexpLine(out, "store-1", "Voter") {
			t.Fatalf("podflow store status:\n%s", out)
		}
	})
}

// testPodflowFates: `podflow publish --wait` tells each pod's fate with
// its exit code (scheduled 0, refused 1, unschedulable 2), and `podflow
// streams` names the unschedulable pod as stuck in the scheduler — its
// retries are no progress — and never a pod already deleted.
func testPodflowFates(t *testing.T, c *cluster, k *kubectl) {
	pod := func(name, extra string) string {
		f := filepath.Join(t.TempDir(), name+".yaml")
		m := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n  containers:\n  - name: c\n    image: busybox\n" + extra
		if err := os.WriteFile(f, []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	publish := func(file string) (string, int) {
		t.Helper()
		return c.podflowTimeout(90*time.Second, "publish", "--wait", "--timeout", "60s", "-f", file)
	}

	out, code := publish(pod("fate-created", ""))
	if code != 0 || !regexp.MustCompile(`(?m)^pod/fate-created scheduled to sim-node-\d+$`).MatchString(out) {
		t.Fatalf("publish --wait of a pod that fits: exit %d\n%s", code, out)
	}

	// Admission's validation refuses a container name that is no DNS label.
	out, code = publish(pod("fate-refused", "  - name: Not_A_Label\n    image: busybox\n"))
	if code != 1 || !strings.Contains(out, "Error from server (Invalid)") || !strings.Contains(out, "Not_A_Label") {
		t.Fatalf("publish --wait of an invalid pod: exit %d (want 1)\n%s", code, out)
	}
	if _, errs, kcode := k.run("get", "pod", "fate-refused"); kcode != 1 || !strings.Contains(errs, "NotFound") {
		t.Fatalf("the refused pod was stored: exit %d %s", kcode, errs)
	}

	out, code = publish(pod("fate-unschedulable", "    resources:\n      requests:\n        cpu: \"100000\"\n"))
	if code != 2 || !strings.Contains(out, "pod/fate-unschedulable created, unschedulable: FailedScheduling") {
		t.Fatalf("publish --wait of a pod no node fits: exit %d (want 2)\n%s", code, out)
	}

	out, code = publish(pod("fate-deleted", ""))
	if code != 0 {
		t.Fatalf("publish --wait: exit %d\n%s", code, out)
	}
	k.must("delete", "pod", "fate-deleted", "--wait=true")

	// The scheduler retries fate-unschedulable every few seconds: with a
	// budget of 3 s it is stuck all the same.
	eventually(t, 60*time.Second, "streams to name fate-unschedulable stuck in the scheduler", func() (bool, string) {
		out := c.mustPodflow("streams", "--budget", "3s", "-o", "json")
		var rep struct {
			Stuck struct {
				Pods []struct{ Name, Stage, Reason string } `json:"pods"`
			} `json:"StuckPods"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("streams -o json does not parse: %v\n%s", err, out)
		}
		found := false
		for _, p := range rep.Stuck.Pods {
			switch p.Name {
			case "fate-deleted", "fate-refused":
				t.Fatalf("streams names %s stuck:\n%s", p.Name, out)
			case "fate-unschedulable":
				found = p.Stage == "scheduler" && strings.Contains(p.Reason, "FailedScheduling")
			}
		}
		return found, out
	})
	k.must("delete", "pod", "fate-created", "fate-unschedulable", "--wait=true")
}

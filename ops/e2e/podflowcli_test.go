package e2e

import (
	"encoding/json"
	"strings"
	"testing"

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
	t.Run("store status", func(t *testing.T) {
		out := c.mustPodflow("store", "status")
		if !strings.Contains(out, "leader store-") || !regexpLine(out, "store-1", "Voter") {
			t.Fatalf("podflow store status:\n%s", out)
		}
	})
}

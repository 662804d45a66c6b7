package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// TestLinuxRuntime runs the seed's pod as a real container through the
// whole system (`podflow up --runtime linux`): it runs, answers HTTP from
// the host on its pod IP, its logs are readable, and once podflow stops no
// network namespace, podflow link, cgroup or mount is left.
func TestLinuxRuntime(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces and mounts (CI runs as root)")
	}
	before := kernelObjects(t)
	c := startCluster(t, "--runtime", "linux")
	c.mustPodflow("apply", "-f", filepath.Join("examples", "nginx-service.yaml"), "-f", filepath.Join("examples", "nginx-pod.yaml"))
	p := c.waitPod("default", "my-nginx-pod", "Running and Ready", func(p *corev1.Pod) bool {
		return p.GetStatus().GetPhase() == "Running" && ready(p)
	})
	ip := p.GetStatus().GetPodIp()
	client := &http.Client{Timeout: 3 * time.Second}
	var body string
	eventually(t, 20*time.Second, "an HTTP answer from the pod", func() (bool, string) {
		resp, err := client.Get(fmt.Sprintf("http://%s:80/healthz", ip))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200, resp.Status
	})
	if !strings.Contains(body, "ok") {
		t.Errorf("healthz body %q", body)
	}
	eventually(t, 10*time.Second, "the request in the container's log", func() (bool, string) {
		out, _ := c.podflow("logs", "my-nginx-pod")
		return strings.Contains(out, "GET /healthz 200"), out
	})
	// The node reports the pulled image (ImageLocality scores with it).
	eventually(t, 30*time.Second, "the image in Node.status.images", func() (bool, string) {
		n, err := objects.Get[*corev1.Node](context.Background(), c.store, "", "linux-node-1")
		if err != nil {
			return false, err.Error()
		}
		for _, im := range n.GetStatus().GetImages() {
			for _, name := range im.GetNames() {
				if strings.Contains(name, "nginx") && im.GetSizeBytes() > 0 {
					return true, ""
				}
			}
		}
		return false, fmt.Sprint(n.GetStatus().GetImages())
	})
	c.mustPodflow("delete", "pod", "my-nginx-pod", "--grace-period", "2")
	c.stop()
	if after := kernelObjects(t); after != before {
		t.Fatalf("kernel objects left behind:\nbefore: %s\nafter:  %s", before, after)
	}
}

// kernelObjects lists podflow's netns, links, cgroups and mounts.
func kernelObjects(t *testing.T) string {
	t.Helper()
	var parts []string
	for _, cmd := range [][]string{{"ip", "netns", "list"}, {"ip", "-o", "link"}, {"cat", "/proc/self/mountinfo"}} {
		out, err := exec.Command(cmd[0], cmd[1:]...).Output()
		if err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "podflow") || strings.HasPrefix(strings.TrimSpace(l), "pf") || strings.Contains(l, ": pf") {
				parts = append(parts, strings.Fields(l)[0])
			}
		}
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/podflow*")
	parts = append(parts, cgs...)
	return strings.Join(parts, " ")
}

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

	"github.com/podflow/podflow/nodeagent/linux/network"
	"github.com/podflow/podflow/nodeagent/linux/proxy"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// TestLinuxRuntime runs the seed's pod as a real container through the
// whole system (`podflow up --runtime linux`): it runs, answers HTTP from
// the host on its pod IP, its logs are readable, and once podflow stops no
// network namespace, podflow link, cgroup or mount is left — with another
// tool's `ip netns add` run meanwhile, and a second `podflow up` refused.
func TestLinuxRuntime(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces and mounts (CI runs as root)")
	}
	parallel(t, linuxRuntime)
	before := kernelObjects(t, "linux-node-1")
	c := startCluster(t, "--runtime", "linux")
	c.mustPodflow("apply", "-f", filepath.Join("examples", "nginx-service.yaml"), "-f", filepath.Join("examples", "nginx-pod.yaml"))
	p := c.waitPod("default", "my-nginx-pod", "Running and Ready", func(p *corev1.Pod) bool {
		return p.GetStatus().GetPhase() == "Running" && ready(p)
	})
	ip := p.GetStatus().GetPodIp()
	// Someone else's `ip netns add` while podflow's pods run must not pin
	// their namespaces (iproute2 covers a plain /run/netns with a mount).
	other := fmt.Sprintf("pftest-e2e-%d", time.Now().UnixNano())
	if out, err := exec.Command("ip", "netns", "add", other).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	deleted := false
	deleteOther := func() {
		if deleted {
			return
		}
		deleted = true
		if out, err := exec.Command("ip", "netns", "delete", other).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v\n%s", other, err, out)
		}
	}
	t.Cleanup(deleteOther)
	// A second podflow on this machine refuses its Linux node at once and
	// leaves this one's alone.
	if out, err := exec.Command(binary, "up", "--data-dir", t.TempDir(), "--nats-port", "0", "-q", "--runtime", "linux").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), `node "linux-node-1" is run by a live agent on this machine`) {
		t.Errorf("a second podflow up --runtime linux: %v\n%s", err, out)
	}
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
	// And through the Kubernetes API: stock kubectl logs.
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "--kubeconfig", filepath.Join(c.dir, "kubeconfig"), "logs", "my-nginx-pod").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "GET /healthz 200") {
			t.Errorf("kubectl logs: %v\n%s", err, out)
		}
	}
	// Readiness follows the container's health, and the EndpointSlice
	// follows readiness: the seed pod leaves its Service when /readyz fails
	// and joins again when it recovers.
	c.mustPodflow("apply", "-f", writeTemp(t, `apiVersion: v1
kind: Pod
metadata: {name: web-real, labels: {app: web-real}}
spec:
  containers:
  - name: http
    image: podflow/http:1
    readinessProbe: {httpGet: {path: /readyz, port: 8080}, periodSeconds: 1, failureThreshold: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web-real}
spec:
  selector: {app: web-real}
  ports: [{port: 80, targetPort: 8080}]
`))
	web := c.waitPod("default", "web-real", "Running and Ready", func(p *corev1.Pod) bool {
		return p.GetStatus().GetPhase() == "Running" && ready(p)
	})
	webIP := web.GetStatus().GetPodIp()
	inSlice := func() bool { return contains(c.sliceAddrs("default", "web-real"), webIP) }
	eventually(t, 20*time.Second, "web-real in its EndpointSlice", func() (bool, string) { return inSlice(), "" })
	flip := func(path string) {
		resp, err := client.Get(fmt.Sprintf("http://%s:8080%s", webIP, path))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	flip("/fail-readiness")
	eventually(t, 20*time.Second, "web-real NotReady and out of its EndpointSlice", func() (bool, string) {
		p, err := c.pod("default", "web-real")
		return err == nil && !ready(p) && !inSlice(), fmt.Sprint(c.sliceAddrs("default", "web-real"))
	})
	flip("/recover-readiness")
	eventually(t, 20*time.Second, "web-real Ready and back in its EndpointSlice", func() (bool, string) {
		p, err := c.pod("default", "web-real")
		return err == nil && ready(p) && inSlice(), fmt.Sprint(c.sliceAddrs("default", "web-real"))
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
	deleteOther()
	if after := kernelObjects(t, "linux-node-1"); after != before {
		t.Fatalf("kernel objects left behind:\nbefore: %s\nafter:  %s", before, after)
	}
}

// kernelObjects lists the netns, links, cgroups and mounts of node's
// Linux runtime and of this test's directories: every kernel object the
// agent creates carries its node's bridge name ("pf" + hash, its pods'
// netns are "podflow-<bridge>-<uid>", their host veths are the bridge's
// ports) or its cgroup root ("podflow-<node>"), and its mounts lie under
// the test's data directory or its netns. Objects of other tests running
// on the machine at the same time (make test runs packages concurrently)
// are not this system's and are not counted.
func kernelObjects(t *testing.T, node string) string {
	t.Helper()
	bridge := network.BridgeNameFor(node)
	dirs := filepath.Dir(t.TempDir()) // the test's own temporary root
	ours := func(l string) bool {
		return strings.Contains(l, bridge) || strings.Contains(l, dirs) || strings.Contains(l, "podflow-"+node)
	}
	var parts []string
	for _, cmd := range [][]string{{"ip", "netns", "list"}, {"ip", "-o", "link"}, {"cat", "/proc/self/mountinfo"}} {
		out, err := exec.Command(cmd[0], cmd[1:]...).Output()
		if err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if ours(l) {
				parts = append(parts, strings.Fields(l)[0])
			}
		}
	}
	for _, glob := range []string{"/sys/fs/cgroup/podflow-" + node + "*", "/sys/fs/cgroup/*/podflow-" + node + "*"} {
		cgs, _ := filepath.Glob(glob)
		parts = append(parts, cgs...)
	}
	return strings.Join(parts, " ")
}

// nftTables lists the nftables tables of node's proxy and hostPorts
// (named after the node and its bridge).
func nftTables(t *testing.T, node string) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Skipf("nft list tables: %v\n%s (the nft command is needed to check the node's tables)", err, out)
	}
	var mine []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, proxy.TableFor(node)) || strings.Contains(l, network.BridgeNameFor(node)) {
			mine = append(mine, strings.TrimSpace(l))
		}
	}
	return strings.Join(mine, ", ")
}

// TestLinuxTwoNodes runs two real nodes on this machine with one `podflow
// up --runtime linux --linux-nodes 2`: both are Ready, each with its own
// pod CIDR, bridge, cgroup root and nftables tables; a pod on
// linux-node-2 (with its node's ServiceAccount token: each agent runs as
// its own node) reaches a pod on linux-node-1 by its pod IP and through
// its Service's ClusterIP (the agents route between their pod CIDRs
// through the host, without NAT); and once podflow stops, no kernel
// object of either node is left.
func TestLinuxTwoNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces and mounts (CI runs as root)")
	}
	parallel(t, linuxRuntime)
	nodes := []string{"linux-node-1", "linux-node-2"}
	var before []string
	for _, n := range nodes {
		before = append(before, kernelObjects(t, n)+" | "+nftTables(t, n))
	}
	c := startCluster(t, "--runtime", "linux", "--linux-nodes", "2")
	if !strings.Contains(c.output(), "2 Linux nodes (linux-node-1, linux-node-2)") {
		t.Errorf("up's running line does not name both nodes:\n%s", c.output())
	}
	ctx := context.Background()
	cidrs := map[string]bool{}
	for _, name := range nodes {
		eventually(t, 30*time.Second, name+" Ready", func() (bool, string) {
			n, err := objects.Get[*corev1.Node](ctx, c.store, "", name)
			if err != nil {
				return false, err.Error()
			}
			for _, cond := range n.GetStatus().GetConditions() {
				if cond.GetType() == "Ready" && cond.GetStatus() == "True" && n.GetSpec().GetPodCidr() != "" {
					cidrs[n.GetSpec().GetPodCidr()] = true
					return len(n.GetSpec().GetTaints()) == 0, fmt.Sprint(n.GetSpec().GetTaints())
				}
			}
			return false, fmt.Sprint(n.GetStatus().GetConditions())
		})
		if tables := nftTables(t, name); !strings.Contains(tables, proxy.TableFor(name)) {
			t.Errorf("%s's proxy table %s not among %q", name, proxy.TableFor(name), tables)
		}
	}
	if len(cidrs) != 2 {
		t.Fatalf("pod CIDRs %v: want one of its own per node", cidrs)
	}
	c.mustPodflow("apply", "-f", writeTemp(t, `apiVersion: v1
kind: Pod
metadata: {name: server, labels: {app: server}}
spec:
  nodeSelector: {kubernetes.io/hostname: linux-node-1}
  containers:
  - name: http
    image: podflow/http:1
---
apiVersion: v1
kind: Service
metadata: {name: server}
spec:
  selector: {app: server}
  ports: [{port: 80, targetPort: 8080}]
`))
	server := c.waitPod("default", "server", "Running and Ready", func(p *corev1.Pod) bool {
		return p.GetStatus().GetPhase() == "Running" && ready(p)
	})
	eventually(t, 20*time.Second, "the server in its EndpointSlice", func() (bool, string) {
		return contains(c.sliceAddrs("default", "server"), server.GetStatus().GetPodIp()), ""
	})
	svc, err := objects.Get[*corev1.Service](ctx, c.store, "default", "server")
	if err != nil {
		t.Fatal(err)
	}
	// Exits 0 only on a 200 from the server pod, first by its pod IP, then
	// through its Service. (busybox-static's wget crashes without NSS
	// files in the image; nc does the request.)
	get := `for i in $(seq 1 30); do printf 'GET /healthz HTTP/1.0\r\n\r\n' | nc -w 2 %[1]s %[2]d | grep -q '200 OK' && break; [ $i = 30 ] && { echo no answer from %[1]s:%[2]d; exit 1; }; sleep 1; done; echo ok %[1]s:%[2]d; `
	c.mustPodflow("apply", "-f", writeTemp(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeSelector: {kubernetes.io/hostname: linux-node-2}
  restartPolicy: Never
  containers:
  - name: nc
    image: podflow/busybox:1
    command: [sh, -c, %q]
`, fmt.Sprintf(get, server.GetStatus().GetPodIp(), 8080)+fmt.Sprintf(get, svc.GetSpec().GetClusterIp(), 80)+"test -s /var/run/secrets/kubernetes.io/serviceaccount/token")))
	client := c.waitPodFor(90*time.Second, "default", "client", "Succeeded", func(p *corev1.Pod) bool {
		return p.GetStatus().GetPhase() == "Succeeded" || p.GetStatus().GetPhase() == "Failed"
	})
	if client.GetStatus().GetPhase() != "Succeeded" {
		out, _ := c.podflow("logs", "client")
		t.Fatalf("client pod on linux-node-2 ended %s: %v\n%s", client.GetStatus().GetPhase(), client.GetStatus().GetContainerStatuses(), out)
	}
	if client.GetSpec().GetNodeName() != "linux-node-2" || server.GetSpec().GetNodeName() != "linux-node-1" {
		t.Fatalf("pods on %s and %s", client.GetSpec().GetNodeName(), server.GetSpec().GetNodeName())
	}
	// Each node keeps its pods' cgroups under a root of its own: node 2's
	// recovery never takes node 1's pods for orphans.
	v1, _ := filepath.Glob("/sys/fs/cgroup/memory/podflow-linux-node-1/*/pod" + server.GetMetadata().GetUid())
	v2, _ := filepath.Glob("/sys/fs/cgroup/podflow-linux-node-1/*/pod" + server.GetMetadata().GetUid())
	if cgs := append(v1, v2...); len(cgs) != 1 {
		t.Errorf("the server pod's cgroup under podflow-linux-node-1: %v", cgs)
	}
	c.stop()
	for i, n := range nodes {
		if after := kernelObjects(t, n) + " | " + nftTables(t, n); after != before[i] {
			t.Errorf("%s's kernel objects left behind:\nbefore: %s\nafter:  %s", n, before[i], after)
		}
	}
}

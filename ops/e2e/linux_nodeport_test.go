package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/network"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// TestLinuxNodePortHostPortAndDNS: on the Linux runtime a NodePort
// Service answers on the node's address (its InternalIP, the bridge's
// gateway) and its node port, and a pod's hostPort on the node's address,
// both from another pod and from the host; pods/proxy and services/proxy
// reach the pod through the API; a pod resolves a headless Service's
// endpoints by their pods' hostname under the subdomain
// (web-0.web-hl.default.svc.cluster.local) or, without one, by their
// address dashed, and an ExternalName
// Service through its CNAME; a second
// pod asking for the same hostPort is not scheduled ("didn't have free
// ports") until the first is deleted, then answers there itself. Traffic
// goes only to the node's bridge address and into the pods; once podflow
// stops no hostport table of it is left.
func TestLinuxNodePortHostPortAndDNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces and nftables (CI runs as root)")
	}
	parallel(t, linuxRuntime)
	c := startCluster(t, "--runtime", "linux")
	const hostPort = 38081
	server := func(name, labels, port string) string {
		dns := "" // web is web-0 under the headless Service web-hl
		if name == "web" {
			dns = "\n  hostname: web-0\n  subdomain: web-hl"
		}
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {%s}}
spec:%s
  containers:
  - name: http
    image: podflow/http:1
    ports: [{containerPort: 8080%s}]
    readinessProbe: {httpGet: {path: /readyz, port: 8080}, periodSeconds: 1}
---
`, name, labels, dns, port)
	}
	c.mustPodflow("apply", "-f", writeTemp(t, server("web", "app: np", "")+server("hp-a", "app: hp", fmt.Sprintf(", hostPort: %d", hostPort))+`apiVersion: v1
kind: Service
metadata: {name: web-np}
spec:
  type: NodePort
  selector: {app: np}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-hl}
spec:
  clusterIP: None
  selector: {app: np}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: hp-hl}
spec:
  clusterIP: None
  selector: {app: hp}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: alias}
spec:
  type: ExternalName
  externalName: web-np.default.svc.cluster.local
`))
	ips := map[string]string{}
	for _, name := range []string{"web", "hp-a"} {
		p := c.waitPodFor(90*time.Second, "default", name, "Running and Ready", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Running" && ready(p) })
		ips[name] = p.GetStatus().GetPodIp()
	}
	webIP := ips["web"]
	// The second pod on the same hostPort: the scheduler keeps it out.
	c.mustPodflow("apply", "-f", writeTemp(t, server("hp-b", "app: hp", fmt.Sprintf(", hostPort: %d", hostPort))))
	c.waitPod("default", "hp-b", "unschedulable for its hostPort", func(p *corev1.Pod) bool {
		cd := condition(p, "PodScheduled")
		return cd.GetStatus() == "False" && strings.Contains(cd.GetMessage(), "didn't have free ports for the requested pod ports")
	})

	ctx := context.Background()
	node, err := objects.Get[*corev1.Node](ctx, c.store, "", "linux-node-1")
	if err != nil {
		t.Fatal(err)
	}
	var nodeIP string
	for _, a := range node.GetStatus().GetAddresses() {
		if a.GetType() == "InternalIP" {
			nodeIP = a.GetAddress()
		}
	}
	if !strings.HasPrefix(nodeIP, "10.244.") || !strings.HasSuffix(nodeIP, ".1") {
		t.Fatalf("node InternalIP %q, want its bridge's gateway (10.244.x.1)", nodeIP)
	}
	svc, err := objects.Get[*corev1.Service](ctx, c.store, "default", "web-np")
	if err != nil {
		t.Fatal(err)
	}
	np := svc.GetSpec().GetPorts()[0].GetNodePort()
	if np < 30000 || np > 32767 || svc.GetSpec().GetExternalTrafficPolicy() != "Cluster" {
		t.Fatalf("Service web-np: node port %d, externalTrafficPolicy %q", np, svc.GetSpec().GetExternalTrafficPolicy())
	}
	nodePort := net.JoinHostPort(nodeIP, strconv.Itoa(int(np)))
	hostPortAddr := net.JoinHostPort(nodeIP, strconv.Itoa(hostPort))
	t.Logf("node %s: NodePort Service at %s, hostPort at %s, web at %s", nodeIP, nodePort, hostPortAddr, webIP)

	// From the host.
	get := func(addr string) (string, error) {
		cl := http.Client{Timeout: 2 * time.Second}
		resp, err := cl.Get("http://" + addr + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for addr, who := range map[string]string{nodePort: "web-0", hostPortAddr: "hp-a"} {
		eventually(t, 20*time.Second, "the host reaches "+who+" at "+addr, func() (bool, string) {
			out, err := get(addr)
			return err == nil && strings.Contains(out, "podflow httpserver on "+who+" "), fmt.Sprint(out, err)
		})
	}

	// From a pod: the node port, the hostPort, and names.
	// hp-a has no hostname: its endpoint's name is its address, dashed.
	epName := strings.ReplaceAll(ips["hp-a"], ".", "-") + ".hp-hl.default.svc.cluster.local"
	c.mustPodflow("apply", "-f", writeTemp(t, busyboxPod("client", fmt.Sprintf(`for i in $(seq 1 60); do
  printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 %s %d | grep httpserver | sed 's/^/NODEPORT /'
  printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 %s %d | grep httpserver | sed 's/^/HOSTPORT /'
  nslookup -type=a %s | awk '/^Address/ {print "ENDPOINT", $NF}'
  nslookup -type=a web-0.web-hl.default.svc.cluster.local | awk '/^Address/ {print "HOSTNAME", $NF}'
  nslookup -type=a alias.default.svc.cluster.local | awk '/^Address/ {print "ALIAS", $NF}'
  sleep 0.5
done
sleep 3600
`, nodeIP, np, nodeIP, hostPort, epName))))
	eventually(t, 60*time.Second, "the client pod's answers through the node port and the hostPort, and its names", func() (bool, string) {
		out, _ := c.podflow("logs", "client")
		return strings.Contains(out, "NODEPORT podflow httpserver on web-0 ") && strings.Contains(out, "HOSTPORT podflow httpserver on hp-a ") &&
			strings.Contains(out, "ENDPOINT "+ips["hp-a"]+"\n") && strings.Contains(out, "HOSTNAME "+webIP+"\n") &&
			strings.Contains(out, "ALIAS "+svc.GetSpec().GetClusterIp()+"\n"), out
	})

	// pods/proxy and services/proxy through the API, as kubectl proxy
	// and `kubectl get --raw` use them.
	for _, raw := range []string{"/api/v1/namespaces/default/pods/web:8080/proxy/", "/api/v1/namespaces/default/services/web-np:80/proxy/"} {
		out, err := exec.Command("kubectl", "--kubeconfig", filepath.Join(c.dir, "kubeconfig"), "get", "--raw", raw).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "podflow httpserver on web-0 ") {
			t.Errorf("kubectl get --raw %s: %v\n%s", raw, err, out)
		}
	}

	// hp-a goes: hp-b takes the hostPort and answers there.
	c.mustPodflow("delete", "pod", "hp-a", "--grace-period", "1")
	c.waitPodFor(90*time.Second, "default", "hp-b", "Running and Ready", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Running" && ready(p) })
	eventually(t, 20*time.Second, "the host reaches hp-b at "+hostPortAddr, func() (bool, string) {
		out, err := get(hostPortAddr)
		return err == nil && strings.Contains(out, "podflow httpserver on hp-b "), fmt.Sprint(out, err)
	})

	out, _ := c.podflow("logs", "client")
	t.Logf("the client's log (head):\n%s", strings.Join(strings.SplitN(out, "\n", 14)[:min(13, strings.Count(out, "\n"))], "\n"))
	c.stop()
	if out := run(t, "nft", "list", "tables"); strings.Contains(out, (network.Config{BridgeName: network.BridgeNameFor("linux-node-1")}).HostPortTable()) {
		t.Fatalf("hostport table left after podflow stopped:\n%s", out)
	}
}

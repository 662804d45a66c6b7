package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
)

// serviceCIDR is `podflow up`'s default service CIDR.
const serviceCIDR = "10.96.0.0/16"

// TestLinuxServiceTraffic: two server pods behind a Service and a client
// pod that asks the Service by ClusterIP and by its DNS name, on the
// Linux runtime. Every answer comes from a Ready pod; a pod whose
// readiness fails stops getting answers within seconds ("Running but not
// receiving traffic", failure 5); the Service's rules go with it; once
// podflow stops no nftables table, route or DNS listener of it is left.
// Traffic is sent only from pods: the client asks, another pod flips the
// readiness; the unreachable route for the service CIDR is asserted
// before anything is sent.
func TestLinuxServiceTraffic(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces, nftables and port 53 (CI runs as root)")
	}
	parallel(t, linuxRuntime)
	before := serviceKernelState(t)
	if strings.Contains(before, "podflow") {
		t.Fatalf("podflow service state before the test:\n%s", before)
	}
	c := startCluster(t, "--runtime", "linux")
	eventually(t, 20*time.Second, "the unreachable route for the service CIDR", func() (bool, string) {
		out := run(t, "ip", "route", "show", "type", "unreachable")
		return strings.Contains(out, serviceCIDR), out
	})
	server := func(name string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {app: web}}
spec:
  containers:
  - name: http
    image: podflow/http:1
    readinessProbe: {httpGet: {path: /readyz, port: 8080}, periodSeconds: 1, failureThreshold: 1}
---
`, name)
	}
	c.mustPodflow("apply", "-f", writeTemp(t, server("web-a")+server("web-b")+`apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
`))
	ipOf := map[string]string{}
	for _, name := range []string{"web-a", "web-b"} {
		p := c.waitPod("default", name, "Running and Ready", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Running" && ready(p) })
		ipOf[name] = p.GetStatus().GetPodIp()
	}
	svc, err := objects.Get[*corev1.Service](context.Background(), c.store, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	cip := svc.GetSpec().GetClusterIp()
	if !strings.HasPrefix(cip, "10.96.") {
		t.Fatalf("Service web has clusterIP %q, want one from %s", cip, serviceCIDR)
	}
	eventually(t, 10*time.Second, "both servers in the Service's slice", func() (bool, string) {
		got := c.sliceAddrs("default", "web")
		return contains(got, ipOf["web-a"]) && contains(got, ipOf["web-b"]), fmt.Sprint(got)
	})
	eventually(t, 10*time.Second, "the ClusterIP in the node's nftables rules", func() (bool, string) {
		out := run(t, "nft", "list", "ruleset")
		return strings.Contains(out, cip), out
	})
	// The route is still there: nothing below is sent unless it is.
	if out := run(t, "ip", "route", "show", "type", "unreachable"); !strings.Contains(out, serviceCIDR) {
		t.Fatalf("no unreachable route for %s before sending:\n%s", serviceCIDR, out)
	}

	// The client: busybox's nslookup has a resolver of its own (the
	// static busybox has no NSS for nc's getaddrinfo), so it resolves the
	// name, then asks both addresses with nc, over and over; each answer
	// names the server's address.
	c.mustPodflow("apply", "-f", writeTemp(t, busyboxPod("client", fmt.Sprintf(`cat /etc/resolv.conf
while true; do
  echo "T $(cut -d' ' -f1 /proc/uptime)"
  ip=$(nslookup -type=a web.default.svc.cluster.local | awk '/^Address/ {a=$NF} END {print a}')
  echo "DNS $ip $(cut -d' ' -f1 /proc/uptime)"
  printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 %s 80 | grep httpserver | sed 's/^/CIP /'
  printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 "$ip" 80 | grep httpserver | sed 's/^/BYNAME /'
  sleep 0.1
done
`, cip))))
	c.waitPod("default", "client", "Running", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Running" })
	logs := func() string { out, _ := c.podflow("logs", "client"); return out }
	// answerer matches an answer line: "<kind> podflow httpserver on <host> (<ip>:8080): ...".
	answerer := regexp.MustCompile(`^(CIP|BYNAME) podflow httpserver on \S+ \(([0-9.]+):8080\)`)
	answers := func(out string) (from map[string]map[string]int, n int) {
		from = map[string]map[string]int{"CIP": {}, "BYNAME": {}}
		lines := answerLines(out, answerer)
		for _, l := range lines {
			m := answerer.FindStringSubmatch(l)
			from[m[1]][m[2]]++
		}
		return from, len(lines)
	}
	eventually(t, 30*time.Second, "answers from both servers by ClusterIP and by name", func() (bool, string) {
		out := logs()
		from, _ := answers(out)
		ok := true
		for _, kind := range []string{"CIP", "BYNAME"} {
			ok = ok && from[kind][ipOf["web-a"]] > 0 && from[kind][ipOf["web-b"]] > 0
		}
		return ok, out
	})
	out := logs()
	for _, want := range []string{"nameserver 10.244.", "search default.svc.cluster.local svc.cluster.local cluster.local", "options ndots:5", "DNS " + cip + " "} {
		if !strings.Contains(out, want) {
			t.Errorf("client log lacks %q:\n%s", want, out)
		}
	}
	from, _ := answers(out)
	for kind, ips := range from {
		for ip := range ips {
			if ip != ipOf["web-a"] && ip != ipOf["web-b"] {
				t.Errorf("%s answer from %s, not a Ready server", kind, ip)
			}
		}
	}

	// web-a's readiness fails (a pod asks it to): within seconds it is out
	// of the slice and no answer comes from it any more.
	c.mustPodflow("apply", "-f", writeTemp(t, busyboxPod("flip", fmt.Sprintf(`printf 'GET /fail-readiness HTTP/1.0\r\n\r\n' | nc -w 2 %s 8080`, ipOf["web-a"]))))
	c.waitPodFor(60*time.Second, "default", "flip", "Succeeded", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Succeeded" })
	eventually(t, 20*time.Second, "web-a NotReady and out of the slice", func() (bool, string) {
		p, err := c.pod("default", "web-a")
		got := c.sliceAddrs("default", "web")
		return err == nil && !ready(p) && !contains(got, ipOf["web-a"]) && contains(got, ipOf["web-b"]), fmt.Sprint(got)
	})
	// onlyFrom waits for 20 answers after the proxy had a moment to
	// program the last slice change, and wants them all from ip and none
	// from gone.
	onlyFrom := func(ip, gone, why string) {
		t.Helper()
		time.Sleep(2 * time.Second) // the proxy programs a slice change within a second
		_, mark := answers(logs())
		eventually(t, 30*time.Second, "20 answers after "+why, func() (bool, string) {
			out := logs()
			_, n := answers(out)
			return n >= mark+20, fmt.Sprintf("%d answers; the client's log:\n%s", n-mark, tail(out, 60))
		})
		after := strings.Join(answerLines(logs(), answerer)[mark:], "\n")
		if strings.Contains(after, "("+gone+":") {
			t.Errorf("answers from %s after %s:\n%s", gone, why, after)
		}
		if !strings.Contains(after, "("+ip+":") {
			t.Errorf("no answer from %s after %s:\n%s", ip, why, after)
		}
	}
	onlyFrom(ipOf["web-b"], ipOf["web-a"], "web-a went NotReady")
	// Failure 5, "Running but not receiving traffic", and describe says why.
	if out := c.mustPodflow("describe", "service", "web"); !regexp.MustCompile(`web-a\s+`+regexp.QuoteMeta(ipOf["web-a"])+`\s+no\s+not Ready`).MatchString(out) ||
		!strings.Contains(out, "IP:               "+cip) {
		t.Errorf("describe service web does not say web-a is no endpoint for not being Ready:\n%s", out)
	}

	// web-a recovers; web-b's labels change so the Service no longer
	// selects it: it stops receiving, web-a takes everything.
	c.mustPodflow("apply", "-f", writeTemp(t, busyboxPod("unflip", fmt.Sprintf(`printf 'GET /recover-readiness HTTP/1.0\r\n\r\n' | nc -w 2 %s 8080`, ipOf["web-a"]))))
	// (The endpoints stage's Pod informer sees the label change.)
	if out, err := exec.Command("kubectl", "--kubeconfig", filepath.Join(c.dir, "kubeconfig"), "label", "pod", "web-b", "app=web-elsewhere", "--overwrite").CombinedOutput(); err != nil {
		t.Fatalf("kubectl label: %v\n%s", err, out)
	}
	eventually(t, 20*time.Second, "web-a back and web-b out of the slice", func() (bool, string) {
		got := c.sliceAddrs("default", "web")
		return contains(got, ipOf["web-a"]) && !contains(got, ipOf["web-b"]), fmt.Sprint(got)
	})
	onlyFrom(ipOf["web-a"], ipOf["web-b"], "web-b's labels stopped matching")

	// The Service goes: its rules and its name go with it.
	c.mustPodflow("delete", "service", "web")
	eventually(t, 10*time.Second, "the ClusterIP gone from the nftables rules", func() (bool, string) {
		out := run(t, "nft", "list", "ruleset")
		return !strings.Contains(out, cip), out
	})
	if _, err := c.store.Client().Get(context.Background(), ipalloc.Key(cip)); !errors.Is(err, raftstore.ErrNotFound) {
		t.Errorf("ClusterIP %s still allocated after the Service went: %v", cip, err)
	}
	c.mustPodflow("delete", "pod", "client", "--grace-period", "1")
	c.stop()
	if after := serviceKernelState(t); after != before {
		t.Fatalf("service state left behind:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// busyboxPod is a pod that runs script with busybox's sh once.
func busyboxPod(name, script string) string {
	indented := "      " + strings.ReplaceAll(strings.TrimRight(script, "\n"), "\n", "\n      ")
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
  containers:
  - name: sh
    image: podflow/busybox:1
    command:
    - sh
    - -c
    - |
%s
`, name, indented)
}

// answerLines returns the log's answer lines, in order.
func answerLines(out string, answerer *regexp.Regexp) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if answerer.MatchString(strings.TrimSpace(l)) {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

// serviceKernelState lists podflow's nftables tables, the unreachable
// routes and the UDP and TCP listeners on port 53.
func serviceKernelState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(run(t, "nft", "list", "tables"))
	b.WriteString(run(t, "ip", "route", "show", "type", "unreachable"))
	for _, l := range strings.Split(run(t, "ss", "-Hltun"), "\n") {
		if f := strings.Fields(l); len(f) >= 5 && strings.HasSuffix(f[4], ":53") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// run runs a command and returns its output, failing the test on error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// tail returns the last n lines of out.
func tail(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

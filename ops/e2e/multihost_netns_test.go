package e2e

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/network"
	"github.com/podflow/podflow/nodeagent/linux/network/networktest"
)

// netnsRun runs a command and fails t on an error.
func netnsRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// hostsNet makes n "machines": network namespaces pfmh…h1..n, each with
// an uplink up0 (198.19.X.i/24, forwarding on in that namespace only) on
// a bridge in a namespace of its own, pfmh…net: nothing of the test
// touches the machine's own network. Cleanup deletes them.
func hostsNet(t *testing.T, n int) (ns []string, ips []string) {
	t.Helper()
	id := fmt.Sprintf("pfmh%04x", rand.IntN(1<<16))
	sub := rand.IntN(256)
	netNS := id + "net"
	netnsRun(t, "ip", "netns", "add", netNS)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", netNS).Run() })
	netnsRun(t, "ip", "-n", netNS, "link", "add", "pfmhbr", "type", "bridge")
	netnsRun(t, "ip", "-n", netNS, "link", "set", "pfmhbr", "up")
	for i := 1; i <= n; i++ {
		h := fmt.Sprintf("%sh%d", id, i)
		netnsRun(t, "ip", "netns", "add", h)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", h).Run() })
		v := fmt.Sprintf("pfmhv%d", i)
		ip := fmt.Sprintf("198.19.%d.%d", sub, i)
		netnsRun(t, "ip", "-n", netNS, "link", "add", v, "type", "veth", "peer", "name", "up0", "netns", h)
		netnsRun(t, "ip", "-n", netNS, "link", "set", v, "master", "pfmhbr", "up")
		netnsRun(t, "ip", "-n", h, "addr", "add", ip+"/24", "dev", "up0")
		netnsRun(t, "ip", "-n", h, "link", "set", "up0", "up")
		netnsRun(t, "ip", "-n", h, "link", "set", "lo", "up")
		netnsRun(t, "ip", "netns", "exec", h, "sysctl", "-qw", "net.ipv4.conf.up0.forwarding=1")
		ns, ips = append(ns, h), append(ips, ip)
	}
	return ns, ips
}

// getFrom sends GET / to addr from the network namespace at nsPath (a
// pod's) and returns the first line of the answer's body.
func getFrom(nsPath, addr string) (string, error) {
	var c net.Conn
	err := networktest.Do(nsPath, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		if strings.TrimSpace(l) == "" {
			break
		}
	}
	l, _ := r.ReadString('\n')
	return strings.TrimSpace(l), nil
}

// netnsPod is what the test knows of a pod.
// phase is "" before the pod has one, deleting whether it is being
// deleted (then it is not "Running" to the checks).
type netnsPod struct {
	name, uid, node, ip, phase string
	deleting                   bool
}

// TestHostsInNetns (issue 39): three hosts as network namespaces on one
// bridge, each its own address, run the real binaries with up --init and
// up --join and the Linux runtime. Real pods on each reach each other
// across hosts by pod IP without NAT and through a Service (host-gw
// routes: each node routes the other nodes' pod CIDRs via their hosts).
// Every process of the third host is killed: the cluster goes on (a new
// pod runs, and every PodRequested published meanwhile and acknowledged
// becomes a pod: running, or evicted from the dead host's node if the
// scheduler placed it there before the node was found unreachable), pods on the two others still reach each other, the dead
// host's pod is evicted and a ReplicaSet's pod that was there is
// re-created on a live host. The host comes back with the same command and
// its new pods are reached from the others. It dies again for good:
// nothing of any host is left once the others stopped and it was swept
// (stopHosts).
func TestHostsInNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-host test in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, cgroups, mounts")
	}
	parallel(t, linuxRuntime)
	ns, ips := hostsNet(t, 3)
	base := t.TempDir()
	suffix := strings.TrimPrefix(ns[0], "pfmh")[:4]
	var hosts []*host
	for i := range ns {
		hosts = append(hosts, &host{t: t, name: fmt.Sprintf("mh%s-%d", suffix, i+1), ip: ips[i], dir: filepath.Join(base, fmt.Sprint(i+1)), netns: ns[i]})
	}
	hosts[0].args = []string{"--init"}
	// PODFLOW_E2E_KEEP=dir: a failed run's logs of every host (and its
	// up's output) are copied there, after stopHosts and before the data
	// directories are removed; with PODFLOW_E2E_KEEP_PASSED=1 a passed
	// run's too (to compare).
	if keep := os.Getenv("PODFLOW_E2E_KEEP"); keep != "" {
		t.Cleanup(func() {
			if !t.Failed() && os.Getenv("PODFLOW_E2E_KEEP_PASSED") == "" {
				return
			}
			for _, h := range hosts {
				if h.out == nil {
					continue // never started
				}
				dst := filepath.Join(keep, h.name)
				_ = os.MkdirAll(dst, 0o755)
				_ = exec.Command("cp", "-r", filepath.Join(h.dir, "logs"), dst).Run()
				_ = os.WriteFile(filepath.Join(dst, "up.out"), []byte(h.output()), 0o644)
			}
			t.Logf("logs kept in %s", keep)
		})
	}
	t.Cleanup(func() { stopHosts(t, hosts) })
	start := time.Now()
	hosts[0].start()
	tok := regexp.MustCompile(`--token (K10\S+)`).FindStringSubmatch(hosts[0].output())
	if tok == nil {
		t.Fatalf("no join token in:\n%s", hosts[0].output())
	}
	for _, h := range hosts[1:] {
		h.args = []string{"--join", ips[0], "--token", tok[1]}
		h.start()
	}
	hosts[0].waitFor("the streams are R3", 120*time.Second)
	t.Logf("three hosts up in %s", time.Since(start).Round(time.Second))

	kubectl := func(at int, args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=" + filepath.Join("/run/netns", ns[at]), "kubectl",
			"--kubeconfig", filepath.Join(hosts[0].dir, "kubeconfig"), "--request-timeout", "30s"}, args...)...).CombinedOutput()
		return string(out), err
	}
	pods := func() map[string]netnsPod {
		out, err := kubectl(0, "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name}{"\t"}{.metadata.uid}{"\t"}{.spec.nodeName}{"\t"}{.status.podIP}{"\t"}{.status.phase}{"\t"}{.metadata.deletionTimestamp}{"\n"}{end}`)
		m := map[string]netnsPod{}
		if err != nil {
			return m
		}
		for _, l := range strings.Split(out, "\n") {
			// Tab-separated, not trimmed: a pod not bound yet, or without
			// a phase or a deletionTimestamp, is listed too.
			f := strings.Split(l, "\t")
			if len(f) == 6 {
				m[f[0]] = netnsPod{name: f[0], uid: f[1], node: f[2], ip: f[3], phase: f[4], deleting: f[5] != ""}
			}
		}
		return m
	}
	running := func(names ...string) map[string]netnsPod {
		var ps map[string]netnsPod
		eventually(t, 120*time.Second, fmt.Sprint(names, " running"), func() (bool, string) {
			ps = pods()
			for _, n := range names {
				if ps[n].phase != "Running" || ps[n].deleting {
					return false, fmt.Sprint(ps)
				}
			}
			return true, ""
		})
		return ps
	}
	nsOf := func(p netnsPod) string {
		return filepath.Join(network.NetnsDir, "podflow-"+network.BridgeNameFor(p.node)+"-"+p.uid)
	}
	// reach: from's pod reaches to's by pod IP, seen from its own IP.
	reach := func(from, to netnsPod) {
		t.Helper()
		eventually(t, 30*time.Second, from.name+" on "+from.node+" reaching "+to.name+" on "+to.node, func() (bool, string) {
			got, err := getFrom(nsOf(from), net.JoinHostPort(to.ip, "8080"))
			want := fmt.Sprintf("on %s (%s:8080): GET / from %s:", to.name, to.ip, from.ip)
			return err == nil && strings.Contains(got, want), fmt.Sprint(got, err)
		})
	}
	pod := func(name, node, extra string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {app: web}}
spec:
  nodeName: %s
  tolerations: [{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}]
  containers: [{name: http, image: podflow/http:1%s}]
---
`, name, node, extra)
	}
	manifest := pod("pa", hosts[0].name, "") + pod("pb", hosts[1].name, "") + pod("pc", hosts[2].name, "") + fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs}
spec:
  replicas: 1
  selector: {matchLabels: {app: rs}}
  template:
    metadata: {labels: {app: rs}}
    spec:
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - {weight: 100, preference: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [%s]}]}}
      tolerations: [{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}]
      containers: [{name: http, image: podflow/http:1}]
`, hosts[2].name)
	if out, err := kubectl(0, "apply", "-f", writeTemp(t, manifest)); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	ps := running("pa", "pb", "pc")
	pa, pb, pc := ps["pa"], ps["pb"], ps["pc"]
	for _, p := range []netnsPod{pa, pb, pc} {
		for _, q := range []netnsPod{pa, pb, pc} {
			if p != q {
				reach(p, q)
			}
		}
	}
	// The Service from pa: DNATed to the pods of the other hosts too.
	out, err := kubectl(0, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		t.Fatalf("service: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	eventually(t, 60*time.Second, "the Service answered by pb and pc from pa", func() (bool, string) {
		got, err := getFrom(nsOf(pa), net.JoinHostPort(out, "80"))
		for _, p := range []string{"pb", "pc"} {
			if err == nil && strings.Contains(got, "on "+p+" ") {
				seen[p] = true
			}
		}
		return seen["pb"] && seen["pc"], fmt.Sprint(got, err)
	})
	var rsPod netnsPod
	eventually(t, 60*time.Second, "the ReplicaSet's pod running", func() (bool, string) {
		for _, p := range pods() {
			if strings.HasPrefix(p.name, "rs-") && p.phase == "Running" && !p.deleting {
				rsPod = p
				return true, ""
			}
		}
		return false, ""
	})
	t.Logf("pods and traffic across hosts in %s; the ReplicaSet's pod on %s", time.Since(start).Round(time.Second), rsPod.node)

	// Every process of the third host at once.
	hosts[2].kill()
	if out, err := kubectl(0, "apply", "-f", writeTemp(t, pod("pd", hosts[1].name, ""))); err != nil {
		t.Fatalf("apply after the kill: %v\n%s", err, out)
	}
	// PodRequested published on the bus from the second host while the
	// third is dead: publish exits 0 only with a PubAck for each, and each
	// one acknowledged becomes a pod — running on a live host, or, bound
	// by the scheduler to the dead host's node before the node lifecycle
	// controller found it unreachable (as kube-scheduler does within
	// --node-monitor-grace-period), evicted from it after its
	// tolerationSeconds and gone once the host is back.
	published := writeTemp(t, `apiVersion: v1
kind: Pod
metadata: {name: during}
spec:
  tolerations: [{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}]
  containers: [{name: http, image: podflow/http:1}]
`)
	podflowIn := func(at int, args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=" + filepath.Join("/run/netns", ns[at]), binary,
			"--config", filepath.Join(hosts[at].dir, "config.json")}, args...)...).CombinedOutput()
		return string(out), err
	}
	pubOut, err := podflowIn(1, "publish", "-f", published, "--count", "3")
	if err != nil {
		t.Fatalf("publish with the third host dead: %v\n%s", err, pubOut)
	}
	t.Logf("publish with the third host dead:\n%s", pubOut)
	during := []string{"during-0", "during-1", "during-2"}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, name := range append([]string{"pd"}, during...) {
			out, err := podflowIn(1, "trace", "pod", name)
			t.Logf("podflow trace pod %s: %v\n%s", name, err, out)
		}
		out, err := podflowIn(1, "streams")
		t.Logf("podflow streams: %v\n%s", err, out)
		// What every process of every host logged of them.
		for _, h := range hosts {
			logs, _ := filepath.Glob(filepath.Join(h.dir, "logs", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				for _, line := range strings.Split(string(b), "\n") {
					if strings.Contains(line, "during-") {
						t.Logf("%s %s: %s", h.name, filepath.Base(l), line)
					}
				}
			}
		}
	})
	pd := running("pd")["pd"]
	onDead := map[string]bool{}
	eventually(t, 120*time.Second, fmt.Sprint(during, " running on a live host or evicted from the dead one"), func() (bool, string) {
		ps := pods()
		for _, n := range during {
			p, ok := ps[n]
			switch {
			case !ok:
				return false, n + " not stored yet: " + fmt.Sprint(ps)
			case p.node == hosts[2].name && !p.deleting:
				return false, n + " on the dead host, not evicted yet: " + fmt.Sprint(ps)
			case p.node == hosts[2].name:
				onDead[n] = true
			case p.phase != "Running" || p.deleting:
				return false, n + " not running: " + fmt.Sprint(ps)
			}
		}
		return true, ""
	})
	t.Logf("published during the kill: %d of %v scheduled to the dead host and evicted, the others running", len(onDead), during)
	reach(pa, pd)
	reach(pd, pa)
	eventually(t, 90*time.Second, "pc evicted and the ReplicaSet's pod on a live host", func() (bool, string) {
		ps := pods()
		live := 0
		for _, p := range ps {
			if strings.HasPrefix(p.name, "rs-") && p.phase == "Running" && !p.deleting && p.node != hosts[2].name {
				live++
			}
		}
		_, pcLeft := ps["pc"] // kept Terminating until its node comes back
		out, _ := kubectl(0, "get", "pod", "pc", "-o", "jsonpath={.metadata.deletionTimestamp}")
		return pcLeft && strings.TrimSpace(out) != "" && live == 1, fmt.Sprint(ps, out)
	})

	// The host comes back with the same command.
	hosts[2].start()
	if out, err := kubectl(0, "apply", "-f", writeTemp(t, pod("pe", hosts[2].name, ""))); err != nil {
		t.Fatalf("apply after the rejoin: %v\n%s", err, out)
	}
	pe := running("pe")["pe"]
	reach(pa, pe)
	reach(pe, pb)
	eventually(t, 60*time.Second, "pc and the pods evicted with it gone", func() (bool, string) {
		ps := pods()
		if _, ok := ps["pc"]; ok {
			return false, "pc"
		}
		for n := range onDead {
			if _, ok := ps[n]; ok {
				return false, n
			}
		}
		return true, ""
	})
	t.Logf("kill, eviction and rejoin in %s in all", time.Since(start).Round(time.Second))
	// The third host dies for good, its pod pe running: stopHosts sweeps
	// what it left in the kernel, as after a test that fails midway.
	hosts[2].kill()
}

package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func threeMembers() []member {
	return []member{
		{Name: "etcd-1", ClientPort: 2001, PeerPort: 3001, DataDir: "/d/1"},
		{Name: "etcd-2", ClientPort: 2002, PeerPort: 3002, DataDir: "/d/2"},
		{Name: "etcd-3", ClientPort: 2003, PeerPort: 3003, DataDir: "/d/3"},
	}
}

func TestEtcdArgs(t *testing.T) {
	got := etcdArgs(threeMembers(), 1)
	want := []string{
		"--name=etcd-2",
		"--data-dir=/d/2",
		"--listen-client-urls=http://127.0.0.1:2002",
		"--advertise-client-urls=http://127.0.0.1:2002",
		"--listen-peer-urls=http://127.0.0.1:3002",
		"--initial-advertise-peer-urls=http://127.0.0.1:3002",
		"--initial-cluster=etcd-1=http://127.0.0.1:3001,etcd-2=http://127.0.0.1:3002,etcd-3=http://127.0.0.1:3003",
		"--initial-cluster-state=new",
		"--initial-cluster-token=podflow-peer",
		"--log-level=warn",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("etcdArgs:\n got %q\nwant %q", got, want)
	}
	for _, a := range got {
		if strings.Contains(a, "no-fsync") {
			t.Errorf("etcd must fsync as podflow's store does: %q", a)
		}
	}
}

// Every process listens on loopback only and the apiserver stores in every
// member.
func TestArgsLoopbackAndEtcdServers(t *testing.T) {
	p := pki{CACert: "ca", ServerCert: "crt", ServerKey: "key", SAKey: "sa", Kubeconfig: "kc"}
	api := apiserverArgs(threeMembers(), p, 6443)
	flag := func(args []string, name string) string {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
		t.Fatalf("no --%s in %q", name, args)
		return ""
	}
	if got := flag(api, "etcd-servers"); got != "http://127.0.0.1:2001,http://127.0.0.1:2002,http://127.0.0.1:2003" {
		t.Errorf("--etcd-servers=%s", got)
	}
	if got := flag(api, "bind-address"); got != "127.0.0.1" {
		t.Errorf("apiserver --bind-address=%s", got)
	}
	if got := flag(api, "secure-port"); got != "6443" {
		t.Errorf("apiserver --secure-port=%s", got)
	}
	if got := flag(schedulerArgs(p, 10259), "bind-address"); got != "127.0.0.1" {
		t.Errorf("scheduler --bind-address=%s", got)
	}
	if got := flag(kwokArgs(p, 10247), "server-address"); got != "127.0.0.1:10247" {
		t.Errorf("kwok --server-address=%s", got)
	}
	for _, args := range [][]string{schedulerArgs(p, 1), kwokArgs(p, 1)} {
		if got := flag(args, "kubeconfig"); got != "kc" {
			t.Errorf("--kubeconfig=%s", got)
		}
	}
	for _, m := range threeMembers() {
		for _, a := range etcdArgs(threeMembers(), 0) {
			if strings.Contains(a, "://") && !strings.Contains(a, "127.0.0.1") {
				t.Errorf("%s: %q is not on loopback", m.Name, a)
			}
		}
	}
}

func TestPodflowArgs(t *testing.T) {
	got := podflowArgs(3000, 100, 2000, "/t/c.json")
	want := []string{"bench", "pipeline", "--own", "--pods", "3000", "--nodes", "100", "--rate", "2000", "--cost-json", "/t/c.json"}
	if !slices.Equal(got, want) {
		t.Fatalf("podflowArgs: got %q, want %q", got, want)
	}
}

func TestMedianPercentileThroughput(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median odd: %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median even: %v", got)
	}
	if !math.IsNaN(median(nil)) {
		t.Errorf("median of nothing is not NaN")
	}
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := percentile(ds, 50); got != 50*time.Millisecond {
		t.Errorf("p50: %v", got)
	}
	if got := percentile(ds, 99); got != 99*time.Millisecond {
		t.Errorf("p99: %v", got)
	}
	if got := percentile(ds, 100); got != 100*time.Millisecond {
		t.Errorf("p100: %v", got)
	}
	if ds[0] != 100*time.Millisecond {
		t.Errorf("percentile sorted its argument")
	}
	t0 := time.Unix(1000, 0)
	if got := throughput(3000, t0, t0.Add(40*time.Second)); got != 75 {
		t.Errorf("throughput: %v", got)
	}
	if got := throughput(3000, t0, t0); got != 0 {
		t.Errorf("throughput over no time: %v", got)
	}
}

func TestRatio(t *testing.T) {
	r := run{
		Podflow: side{PodsPerSec: 900, CPUms: 5400, Pods: 3000},
		Peer:    side{PodsPerSec: 75, CPUms: 54000, Pods: 3000},
	}
	speed, cpu := r.ratio()
	if speed != 12 || cpu != 10 {
		t.Fatalf("ratio: %v× pods/s, %v× CPU; want 12 and 10", speed, cpu)
	}
	if s, c := (run{}).ratio(); s != 0 || c != 0 {
		t.Fatalf("ratio of empty runs: %v, %v", s, c)
	}
}

func TestProcCPU(t *testing.T) {
	// A command name with spaces and a parenthesis, as the kernel writes it.
	stat := "4242 (kube api) x) S 1 4242 4242 0 -1 4194560 5000 0 0 0 1234 566 0 0 20 0 12 0 100 0 0"
	got, err := procCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 18 * time.Second; got != want {
		t.Fatalf("procCPU: %v, want %v", got, want)
	}
	for _, bad := range []string{"", "4242 kube S 1", "1 (a) S 1 2 3", "1 (a) S 1 1 1 0 -1 0 0 0 0 0 x 5 0"} {
		if _, err := procCPU(bad); err == nil {
			t.Errorf("procCPU(%q): no error", bad)
		}
	}
}

const podflowOut = `bench pipeline: 3000 pods at 2000/s offered
offered for 1.5s; the last pod was Running 3.2s after the first request
937 pods/s
PodRequested→Running: p50 1.23456s  p99 1.98765s  max 2.1s  (n=3000)
stage        output           wait p50
`

func TestParsePodflow(t *testing.T) {
	cost, _ := json.Marshal(map[string]any{
		"pods": 3000, "totalCpuMs": 5100.0,
		"processes": []map[string]any{{"name": "nats", "cpuMs": 1300.0}, {"name": "store-1", "cpuMs": 500.0}, {"name": "bench", "cpuMs": 99.0}},
	})
	s, err := parsePodflow(strings.NewReader(podflowOut), cost)
	if err != nil {
		t.Fatal(err)
	}
	if s.PodsPerSec != 937 || s.P50 != 1234560*time.Microsecond || s.P99 != 1987650*time.Microsecond {
		t.Errorf("parsed %v pods/s, p50 %v, p99 %v", s.PodsPerSec, s.P50, s.P99)
	}
	if _, ok := s.ByProcess["bench"]; ok {
		t.Errorf("the bench's own load is listed as podflow's: %v", s.ByProcess)
	}
	if s.Pods != 3000 || s.cpuPerPod() != 1.7 || s.ByProcess["nats"] != 1300 {
		t.Errorf("parsed %d pods, %v CPU ms/pod, %v", s.Pods, s.cpuPerPod(), s.ByProcess)
	}
	for name, c := range map[string]struct{ out, cost string }{
		"no pods/s":       {strings.Replace(podflowOut, "937 pods/s", "", 1), string(cost)},
		"no latency":      {strings.Replace(podflowOut, "PodRequested", "X", 1), string(cost)},
		"bad cost JSON":   {podflowOut, "{"},
		"no pods in cost": {podflowOut, `{"pods":0}`},
	} {
		if _, err := parsePodflow(strings.NewReader(c.out), []byte(c.cost)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestValidate(t *testing.T) {
	o := options{Runs: 1, PeerOnly: true, Peer: peerOptions{Pods: 20000, Nodes: 100, Rate: 0, Workers: 1, Members: 3, Tools: t.TempDir()}}
	err := o.validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--rate 0", "--pods 20000", "kube-apiserver"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// The certificates the bench writes: the serving one verifies for loopback
// against the CA, the kubeconfig's client is in system:masters.
func TestWritePKI(t *testing.T) {
	dir := t.TempDir()
	p, err := writePKI(dir, 6443)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.CACert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate")
	}
	srv, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(srv.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("serving certificate for 127.0.0.1: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.0.0.1"}); err == nil {
		t.Errorf("serving certificate verifies for 10.0.0.1")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" {
		t.Errorf("kubeconfig server %s", cfg.Host)
	}
	cli, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	cliLeaf, err := x509.ParseCertificate(cli.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cliLeaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if !slices.Equal(cliLeaf.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("client certificate groups %q", cliLeaf.Subject.Organization)
	}
	if fi, err := os.Stat(p.SAKey); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("service account key: %v %v", fi, err)
	}
}

package plan_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/services/pipeline"
)

// addrs returns a FreeAddr that hands out 127.0.0.1:9001, :9002, …
func addrs() func() (string, error) {
	n := 9000
	return func() (string, error) { n++; return fmt.Sprintf("127.0.0.1:%d", n), nil }
}

func options() plan.Options {
	return plan.Options{
		Exe: "/bin/podflow", DataDir: "/d", NATSPort: 4222,
		StoreAddrs: []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"},
		StoreUser:  bus.UserCredential{User: "store", Password: "pw"},
		Replicas: map[string]int{pipeline.API: 1, pipeline.Admission: 2, pipeline.Persistence: 1,
			pipeline.Scheduler: 1, pipeline.Status: 1, pipeline.Endpoints: 0},
		Runtime: plan.RuntimeSim, Nodes: 3, NodeGrace: 40 * time.Second,
		APIArgs:  []string{"--https-addr", "127.0.0.1:6443"},
		FreeAddr: addrs(),
	}
}

func names(ps []plan.Process) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestNewOrderAndRoles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		modify  func(*plan.Options)
		kinds   []plan.Kind
		process []string
	}{
		{
			name:  "simulated nodes",
			kinds: []plan.Kind{plan.NATS, plan.Store, plan.StageKind, plan.NodeAgent},
			process: []string{"nats", "store-1", "store-2", "store-3", "api-1", "admission-1", "admission-2",
				"persistence-1", "scheduler-1", "status-1", "nodeagent-sim"},
		},
		{
			name: "NATS cluster, one store replica",
			modify: func(o *plan.Options) {
				o.Cluster, o.ClusterClientPorts, o.ClusterRoutePorts = true, []int{1, 2, 3}, []int{11, 12, 13}
				o.StoreAddrs = o.StoreAddrs[:1]
			},
			kinds: []plan.Kind{plan.NATS, plan.Store, plan.StageKind, plan.NodeAgent},
			process: []string{"nats-1", "nats-2", "nats-3", "store-1", "api-1", "admission-1", "admission-2",
				"persistence-1", "scheduler-1", "status-1", "nodeagent-sim"},
		},
		{
			name:   "linux node with its registry",
			modify: func(o *plan.Options) { o.Runtime = plan.RuntimeLinux },
			kinds:  []plan.Kind{plan.NATS, plan.Store, plan.StageKind, plan.Registry, plan.NodeAgent},
			process: []string{"nats", "store-1", "store-2", "store-3", "api-1", "admission-1", "admission-2",
				"persistence-1", "scheduler-1", "status-1", "registry", "nodeagent-linux-node-1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options()
			if tc.modify != nil {
				tc.modify(&o)
			}
			p, err := plan.New(o)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []plan.Kind
			for _, s := range p.Steps {
				kinds = append(kinds, s.Kind)
				for _, pr := range s.Processes {
					if pr.Kind != s.Kind {
						t.Errorf("%s of kind %s in step %s", pr.Name, pr.Kind, s.Kind)
					}
				}
			}
			if !slices.Equal(kinds, tc.kinds) {
				t.Errorf("steps %v, want %v", kinds, tc.kinds)
			}
			if got := names(p.Processes()); !slices.Equal(got, tc.process) {
				t.Errorf("processes %v, want %v", got, tc.process)
			}
			if p.Supervisor.LogDir != "/d/logs" || p.Supervisor.Validate() != nil {
				t.Errorf("supervisor config %+v", p.Supervisor)
			}
		})
	}
}

func TestProcessArgs(t *testing.T) {
	p, err := plan.New(options())
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]plan.Process{}
	for _, pr := range p.Processes() {
		by[pr.Name] = pr
	}
	for _, tc := range []struct {
		name  string
		role  string
		args  string
		env   []string
		ready plan.Check
	}{
		{"nats", "nats", "nats --data-dir /d/nats --port 4222 --client-config /d/nats/client.json", nil,
			plan.Check{Kind: plan.CheckFile, Path: "/d/nats/client.json", Timeout: 20 * time.Second}},
		{"store-2", "store", "store run --id store-2 --data-dir /d/store-2 --raft-addr 127.0.0.1:7002 --bootstrap store-1=127.0.0.1:7001,store-2=127.0.0.1:7002,store-3=127.0.0.1:7003 --raft-tls-ca /d/pki/ca.crt --raft-tls-cert /d/pki/raft-store-2.crt --raft-tls-key /d/pki/raft-store-2.key --encryption-provider-config /d/encryption-config.yaml",
			[]string{"PODFLOW_NATS_URL=nats://127.0.0.1:4222", "PODFLOW_NATS_USER=store", "PODFLOW_NATS_PASSWORD=pw"},
			plan.Check{Kind: plan.CheckStore, Timeout: 60 * time.Second}},
		{"api-1", "stage/api", "stage api --replica api-1 --config /d/config/stage-api.json --metrics-addr 127.0.0.1:9001 --token-file /d/tokens.csv --seal-key /d/api-seal.key --service-cluster-ip-range 10.96.0.0/16 --https-addr 127.0.0.1:6443",
			[]string{"PODFLOW_NATS_CONFIG=/d/nats/roles/stage-api.json"},
			plan.Check{Kind: plan.CheckConsumer, Consumer: "api", Timeout: 60 * time.Second}},
		{"admission-2", "stage/admission", "stage admission --replica admission-2 --config /d/config/stage-admission.json --metrics-addr 127.0.0.1:9003",
			[]string{"PODFLOW_NATS_CONFIG=/d/nats/roles/stage-admission.json"},
			plan.Check{Kind: plan.CheckConsumer, Consumer: "admission", Timeout: 60 * time.Second}},
		{"status-1", "stage/status", "stage status --replica status-1 --config /d/config/stage-status.json --metrics-addr 127.0.0.1:9006",
			[]string{"PODFLOW_NATS_CONFIG=/d/nats/roles/stage-status.json"},
			plan.Check{Kind: plan.CheckConsumer, Consumer: "status", Timeout: 60 * time.Second}},
		{"nodeagent-sim", "nodeagent", "nodeagent --runtime sim --name sim --nodes 3 --config /d/config/" + p.NodeRole.Role + ".json --metrics-addr 127.0.0.1:9007 --provision=false",
			[]string{"PODFLOW_NATS_CONFIG=/d/nats/roles/" + p.NodeRole.Role + ".json"},
			plan.Check{Kind: plan.CheckConsumer, Consumer: p.NodeRunner.Consumer, Timeout: 60 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, ok := by[tc.name]
			if !ok {
				t.Fatalf("no process %q", tc.name)
			}
			spec := pr.Spec("/bin/podflow")
			if spec.Name != tc.name || spec.Role != tc.role || spec.Path != "/bin/podflow" {
				t.Errorf("spec %s %s %s", spec.Name, spec.Role, spec.Path)
			}
			if got := strings.Join(spec.Args, " "); got != tc.args {
				t.Errorf("args\n got %s\nwant %s", got, tc.args)
			}
			if !slices.Equal(spec.Env, tc.env) {
				t.Errorf("env %v, want %v", spec.Env, tc.env)
			}
			if pr.Ready != tc.ready {
				t.Errorf("ready %+v, want %+v", pr.Ready, tc.ready)
			}
		})
	}
	wantMetrics := map[string]string{"api-1": "127.0.0.1:9001", "admission-1": "127.0.0.1:9002", "admission-2": "127.0.0.1:9003",
		"persistence-1": "127.0.0.1:9004", "scheduler-1": "127.0.0.1:9005", "status-1": "127.0.0.1:9006", "nodeagent-sim": "127.0.0.1:9007"}
	if got := p.Metrics(); !reflect.DeepEqual(got, wantMetrics) {
		t.Errorf("metrics %v, want %v", got, wantMetrics)
	}
	if got, want := p.Consumers(), []string{p.NodeRunner.Consumer, "api", "admission", "persistence", "scheduler", "status"}; !slices.Equal(got, want) {
		t.Errorf("consumers %v, want %v", got, want)
	}
}

func TestClusterAndLinuxArgs(t *testing.T) {
	o := options()
	o.Cluster, o.ClusterClientPorts, o.ClusterRoutePorts = true, []int{4001, 4002, 4003}, []int{6001, 6002, 6003}
	o.Runtime = plan.RuntimeLinux
	p, err := plan.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if p.Streams.Replicas != 3 {
		t.Errorf("streams replicas %d, want 3 on a cluster", p.Streams.Replicas)
	}
	if got, want := p.NATSURLs(), []string{"nats://127.0.0.1:4001", "nats://127.0.0.1:4002", "nats://127.0.0.1:4003"}; !slices.Equal(got, want) {
		t.Errorf("urls %v", got)
	}
	nats2 := p.Step(plan.NATS).Processes[1]
	if got, want := strings.Join(nats2.Args, " "), "nats --data-dir /d/nats-2 --port 4002 --server-name nats-2 --cluster-name podflow --cluster-port 6002 --routes nats-route://127.0.0.1:6001,nats-route://127.0.0.1:6003 --creds /d/nats/creds.json"; got != want {
		t.Errorf("nats-2 args\n got %s\nwant %s", got, want)
	}
	if env := p.Step(plan.Store).Processes[0].Env[0]; env != "PODFLOW_NATS_URL=nats://127.0.0.1:4001,nats://127.0.0.1:4002,nats://127.0.0.1:4003" {
		t.Errorf("store env %s", env)
	}
	reg := p.Step(plan.Registry).Processes[0]
	// Addresses: 6 stage replicas take 9001..9006, the registry 9007.
	if got, want := strings.Join(reg.Args, " "), "registry --data-dir /d/registry --addr 127.0.0.1:9007 --addr-file /d/registry.addr"; got != want {
		t.Errorf("registry args\n got %s\nwant %s", got, want)
	}
	na := p.Step(plan.NodeAgent).Processes[0]
	if got, want := strings.Join(na.Args, " "), "nodeagent --runtime linux --node linux-node-1 --config /d/config/node-linux-node-1.json --data-dir /d/nodes/linux-node-1 --registry 127.0.0.1:9007 --service-cluster-ip-range 10.96.0.0/16 --metrics-addr 127.0.0.1:9008 --provision=false"; got != want {
		t.Errorf("node agent args\n got %s\nwant %s", got, want)
	}
	if p.NodeRunner.Consumer != pipeline.NodeAgentRunnerConfig(plan.LinuxNode).Consumer || p.NodeRole.Role != pipeline.NodeRole(plan.LinuxNode) {
		t.Errorf("node identity %s %s", p.NodeRunner.Consumer, p.NodeRole.Role)
	}
}

// TestTwoLinuxNodes: --linux-nodes 2 runs two node agents, each its own
// node with its own identity, configuration, data directory and consumer,
// and up waits for both.
func TestTwoLinuxNodes(t *testing.T) {
	o := options()
	o.Runtime, o.LinuxNodes = plan.RuntimeLinux, 2
	p, err := plan.New(o)
	if err != nil {
		t.Fatal(err)
	}
	agents := p.Step(plan.NodeAgent).Processes
	if len(agents) != 2 || len(p.Nodes) != 2 {
		t.Fatalf("%d node agents, %d identities: want 2", len(agents), len(p.Nodes))
	}
	for i, na := range agents {
		node := plan.LinuxNodeName(i + 1)
		id := p.Nodes[i]
		if id.Node != node || id.Runner.Consumer != pipeline.NodeAgentRunnerConfig(node).Consumer || id.Role.Role != pipeline.NodeRole(node) {
			t.Errorf("identity %d: %+v", i, id)
		}
		args := strings.Join(na.Args, " ")
		for _, want := range []string{"--node " + node + " ", "--config /d/config/node-" + node + ".json ", "--data-dir /d/nodes/" + node + " "} {
			if !strings.Contains(args, want) {
				t.Errorf("%s args %q lack %q", na.Name, args, want)
			}
		}
		if na.Name != "nodeagent-"+node || na.Ready.Consumer != id.Runner.Consumer ||
			!slices.Equal(na.Env, []string{"PODFLOW_NATS_CONFIG=/d/nats/roles/" + id.Role.Role + ".json"}) {
			t.Errorf("%s: env %v ready %+v", na.Name, na.Env, na.Ready)
		}
		if got := strings.Join(p.NodeAgentArgsOf(id, "r:5000"), " "); !strings.Contains(got, "--node "+node+" ") {
			t.Errorf("decommission args of %s: %s", node, got)
		}
	}
	if c := p.Consumers(); len(c) < 2 || c[0] != p.Nodes[0].Runner.Consumer || c[1] != p.Nodes[1].Runner.Consumer {
		t.Errorf("consumers %v: want both nodes' first", c)
	}
}

func TestNewInvalid(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*plan.Options)
	}{
		{"even store replicas", func(o *plan.Options) { o.StoreAddrs = o.StoreAddrs[:2] }},
		{"no data dir", func(o *plan.Options) { o.DataDir = "" }},
		{"unknown runtime", func(o *plan.Options) { o.Runtime = "auto" }},
		{"unknown stage", func(o *plan.Options) { o.Replicas["kubelet"] = 1 }},
		{"too many replicas", func(o *plan.Options) { o.Replicas[pipeline.Scheduler] = plan.MaxReplicas + 1 }},
		{"cluster without ports", func(o *plan.Options) { o.Cluster = true }},
		{"two real nodes on the simulated runtime", func(o *plan.Options) { o.LinuxNodes = 2 }},
		{"too many real nodes", func(o *plan.Options) { o.Runtime, o.LinuxNodes = plan.RuntimeLinux, plan.MaxLinuxNodes+1 }},
		{"negative real nodes", func(o *plan.Options) { o.Runtime, o.LinuxNodes = plan.RuntimeLinux, -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options()
			tc.modify(&o)
			if _, err := plan.New(o); err == nil {
				t.Fatal("New accepted invalid options")
			}
		})
	}
}

func TestScaleDiff(t *testing.T) {
	for _, tc := range []struct {
		have        []int
		want        int
		start, stop []int
	}{
		{nil, 2, []int{1, 2}, nil},
		{[]int{1}, 1, nil, nil},
		{[]int{1}, 3, []int{2, 3}, nil},
		{[]int{1, 3}, 3, []int{2}, nil},
		{[]int{1, 2, 3}, 1, nil, []int{3, 2}},
		{[]int{2, 5}, 1, nil, []int{5}},
		{[]int{1, 2}, 0, nil, []int{2, 1}},
	} {
		t.Run(fmt.Sprintf("%v→%d", tc.have, tc.want), func(t *testing.T) {
			start, stop := plan.ScaleDiff(tc.have, tc.want)
			if !slices.Equal(start, tc.start) || !slices.Equal(stop, tc.stop) {
				t.Fatalf("ScaleDiff(%v, %d) = %v, %v; want %v, %v", tc.have, tc.want, start, stop, tc.start, tc.stop)
			}
		})
	}
}

func TestPlanScale(t *testing.T) {
	p, err := plan.New(options())
	if err != nil {
		t.Fatal(err)
	}
	start, stop, err := p.Scale(plan.ScaleRequest{Stage: pipeline.Scheduler, Replicas: 3}, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(start); !slices.Equal(got, []string{"scheduler-2", "scheduler-3"}) || stop != nil {
		t.Fatalf("scale up: start %v stop %v", got, stop)
	}
	if got := strings.Join(start[0].Args, " "); got != "stage scheduler --replica scheduler-2 --config /d/config/stage-scheduler.json --metrics-addr 127.0.0.1:9008" {
		t.Errorf("new replica args %s", got)
	}
	start, stop, err = p.Scale(plan.ScaleRequest{Stage: pipeline.Admission, Replicas: 0}, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if start != nil || !slices.Equal(stop, []string{"admission-2", "admission-1"}) {
		t.Fatalf("scale down: start %v stop %v", names(start), stop)
	}
	want := []string{"api-1", "persistence-1", "scheduler-1", "status-1", "scheduler-2", "scheduler-3"}
	if got := names(p.Step(plan.StageKind).Processes); !slices.Equal(got, want) {
		t.Errorf("stage step after scaling %v, want %v", got, want)
	}
	if slices.Contains(p.Consumers(), pipeline.Admission) {
		t.Errorf("consumers %v still wait for admission at 0 replicas", p.Consumers())
	}
	for _, bad := range []plan.ScaleRequest{{Stage: "kubelet", Replicas: 1}, {Stage: pipeline.API, Replicas: -1}, {Stage: pipeline.API, Replicas: 65}} {
		if _, _, err := p.Scale(bad, nil); err == nil {
			t.Errorf("Scale(%+v) accepted", bad)
		}
	}
}

func TestStageIndex(t *testing.T) {
	for name, want := range map[string]int{"scheduler-2": 2, "scheduler-12": 12, "scheduler": 0} {
		if got := plan.StageIndex("scheduler", name); got != want {
			t.Errorf("StageIndex(%q) = %d, want %d", name, got, want)
		}
	}
}

// TestClusterTLSArgs: every store replica speaks raft with its own raft
// certificate, with TLS or without (raft is mutual TLS on loopback too);
// with TLS every NATS server serves clients and routes with the servers'
// certificate, and every store replica dials NATS with the store role's
// client certificate.
func TestClusterTLSArgs(t *testing.T) {
	o := options()
	o.Cluster, o.ClusterClientPorts, o.ClusterRoutePorts = true, []int{4001, 4002, 4003}, []int{6001, 6002, 6003}
	for _, tc := range []struct {
		tls              bool
		wantNATS, wantSt string
	}{
		{false, "--creds /d/nats/creds.json", "--bootstrap store-1=127.0.0.1:7001,store-2=127.0.0.1:7002,store-3=127.0.0.1:7003 --raft-tls-ca /d/pki/ca.crt --raft-tls-cert /d/pki/raft-{name}.crt --raft-tls-key /d/pki/raft-{name}.key --encryption-provider-config /d/encryption-config.yaml"},
		{true, "--creds /d/nats/creds.json --tls-ca /d/pki/ca.crt --tls-cert /d/pki/nats-server.crt --tls-key /d/pki/nats-server.key",
			"--bootstrap store-1=127.0.0.1:7001,store-2=127.0.0.1:7002,store-3=127.0.0.1:7003 --raft-tls-ca /d/pki/ca.crt --raft-tls-cert /d/pki/raft-{name}.crt --raft-tls-key /d/pki/raft-{name}.key --encryption-provider-config /d/encryption-config.yaml --tls-ca /d/pki/ca.crt --nats-tls-cert /d/pki/bus/store.crt --nats-tls-key /d/pki/bus/store.key"},
	} {
		t.Run(fmt.Sprint("tls=", tc.tls), func(t *testing.T) {
			o.TLS, o.FreeAddr = tc.tls, addrs()
			p, err := plan.New(o)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range p.Step(plan.NATS).Processes {
				if args := strings.Join(n.Args, " "); !strings.HasSuffix(args, tc.wantNATS) {
					t.Errorf("%s args %s, want the suffix %s", n.Name, args, tc.wantNATS)
				}
			}
			for _, s := range p.Step(plan.Store).Processes {
				want := strings.ReplaceAll(tc.wantSt, "{name}", s.Name) // each replica its own raft certificate
				if args := strings.Join(s.Args, " "); !strings.HasSuffix(args, want) {
					t.Errorf("%s args %s, want the suffix %s", s.Name, args, want)
				}
			}
		})
	}
}

// TestServiceCIDR: one service CIDR reaches the api replicas and the
// Linux node agent; a bad one is refused naming the flag.
func TestServiceCIDR(t *testing.T) {
	o := options()
	o.Runtime, o.ServiceCIDR = plan.RuntimeLinux, "10.100.0.0/24"
	p, err := plan.New(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range p.Processes() {
		has := strings.Contains(strings.Join(pr.Args, " "), "--service-cluster-ip-range 10.100.0.0/24")
		if want := pr.Stage == pipeline.API || pr.Kind == plan.NodeAgent; has != want {
			t.Errorf("%s: args %v carry the service CIDR: %v, want %v", pr.Name, pr.Args, has, want)
		}
	}
	o.ServiceCIDR = "10.100.0.1/24"
	if _, err := plan.New(o); err == nil || !strings.Contains(err.Error(), "--service-cluster-ip-range") {
		t.Fatalf("New with a bad service CIDR = %v", err)
	}
}

// TestNodeCIDRs: up's --cluster-cidr and --node-cidr-mask-size reach the
// node agent alone; a cluster CIDR too small for the simulated nodes is
// refused before anything starts, naming both flags.
func TestNodeCIDRs(t *testing.T) {
	o := options()
	o.Nodes, o.ClusterCIDR, o.NodeCIDRMaskSize = 5000, "10.0.0.0/12", 25
	p, err := plan.New(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range p.Processes() {
		has := strings.Contains(strings.Join(pr.Args, " "), "--cluster-cidr 10.0.0.0/12 --node-cidr-mask-size 25")
		if want := pr.Kind == plan.NodeAgent; has != want {
			t.Errorf("%s: args %v carry the pod CIDRs: %v, want %v", pr.Name, pr.Args, has, want)
		}
	}
	o.Nodes, o.ClusterCIDR, o.NodeCIDRMaskSize = 5000, "", 0 // sized for the nodes
	if _, err := plan.New(o); err != nil {
		t.Errorf("5000 nodes, default CIDRs: %v", err)
	}
	o.ClusterCIDR = "10.244.0.0/16"
	if _, err := plan.New(o); err == nil || !strings.Contains(err.Error(), "--cluster-cidr 10.244.0.0/16 --node-cidr-mask-size 24 for 5000 nodes") {
		t.Errorf("5000 /24s in a /16: %v", err)
	}
}

// TestPodSecurityDefault: up's --pod-security-default reaches the api
// stage (its front door checks pod updates) and admission (pod creation),
// and nothing else; a level that does not exist is refused at plan time.
func TestPodSecurityDefault(t *testing.T) {
	o := options()
	o.PodSecurityDefault = "baseline"
	p, err := plan.New(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range p.Processes() {
		has := strings.Contains(strings.Join(pr.Args, " "), "--pod-security-default baseline")
		if want := pr.Stage == pipeline.API || pr.Stage == pipeline.Admission; has != want {
			t.Errorf("%s: args %v carry the default level: %v, want %v", pr.Name, pr.Args, has, want)
		}
	}
	o.PodSecurityDefault = "strict"
	if _, err := plan.New(o); err == nil || !strings.Contains(err.Error(), "--pod-security-default") {
		t.Fatalf("New with an unknown level = %v", err)
	}
}

// TestStorePeerAddrs: a replica with dial overrides (podflow chaos's
// relays) gets them as --peer-addrs, sorted; the others get none.
func TestStorePeerAddrs(t *testing.T) {
	o := options()
	o.StorePeerAddrs = map[string]map[string]string{"store-1": {"store-3": "127.0.0.1:8013", "store-2": "127.0.0.1:8012"}}
	p, err := plan.New(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range p.Processes() {
		got := strings.Join(pr.Args, " ")
		switch pr.Name {
		case "store-1":
			if !strings.Contains(got, " --peer-addrs store-2=127.0.0.1:8012,store-3=127.0.0.1:8013 ") {
				t.Errorf("store-1 args %s", got)
			}
		case "store-2", "store-3":
			if strings.Contains(got, "--peer-addrs") {
				t.Errorf("%s args %s", pr.Name, got)
			}
		}
	}
}

// TestClusterRouteRelays: with NATSRoutePeerAddrs each NATS server dials
// its peers' routes at its own relay addresses, and advertises
// NATSRouteAdvertise, so that no gossiped route goes around the relays.
func TestClusterRouteRelays(t *testing.T) {
	o := options()
	o.Cluster, o.ClusterClientPorts, o.ClusterRoutePorts = true, []int{4001, 4002, 4003}, []int{6001, 6002, 6003}
	o.NATSRoutePeerAddrs = map[string]map[string]string{"nats-2": {"nats-1": "127.0.0.1:7721", "nats-3": "127.0.0.1:7723"}}
	o.NATSRouteAdvertise = "127.0.0.1:7700"
	p, err := plan.New(o)
	if err != nil {
		t.Fatal(err)
	}
	nats2 := p.Step(plan.NATS).Processes[1]
	if got, want := strings.Join(nats2.Args, " "), "nats --data-dir /d/nats-2 --port 4002 --server-name nats-2 --cluster-name podflow --cluster-port 6002 --routes nats-route://127.0.0.1:7721,nats-route://127.0.0.1:7723 --creds /d/nats/creds.json --cluster-advertise 127.0.0.1:7700"; got != want {
		t.Errorf("nats-2 args\n got %s\nwant %s", got, want)
	}
}

// TestControllerStage: a controller stage's replica (the node lifecycle
// controller) gets the node grace period, is ready once started (it has
// no consumer) and is no consumer the system waits for.
func TestControllerStage(t *testing.T) {
	o := options()
	o.Replicas[pipeline.NodeLifecycle] = 1
	p, err := plan.New(o)
	if err != nil {
		t.Fatal(err)
	}
	var nl *plan.Process
	for _, pr := range p.Processes() {
		if pr.Stage == pipeline.NodeLifecycle {
			nl = &pr
		}
	}
	if nl == nil {
		t.Fatal("no node lifecycle replica in the plan")
	}
	if got := strings.Join(nl.Args, " "); !strings.HasSuffix(got, "--node-monitor-grace-period 40s") {
		t.Errorf("args %s: want the grace period", got)
	}
	if nl.Ready != (plan.Check{}) || slices.Contains(p.Consumers(), pipeline.NodeLifecycle) {
		t.Errorf("ready %+v, consumers %v: a controller stage has no consumer to wait for", nl.Ready, p.Consumers())
	}
}

// TestNewHostRunsEveryStage: a server of a cluster of several machines
// runs a replica of every stage, named after the host; the root CA
// publisher publishes the cluster CA (without --root-ca-file it refuses
// to start), the node lifecycle controller gets the grace period and the
// simulated node agent the host's --cluster-cidr.
func TestNewHostRunsEveryStage(t *testing.T) {
	p, err := plan.NewHost(plan.HostOptions{Exe: "/bin/podflow", DataDir: "/var/lib/podflow", Name: "h2", Advertise: "10.0.0.2",
		Runtime: plan.RuntimeSim, ServerURLs: []string{"nats://10.0.0.2:4222"}, NodeGrace: 20 * time.Second, ClusterCIDR: "10.245.0.0/16"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	agent := ""
	for _, pr := range p.Processes() {
		if pr.Kind == plan.StageKind {
			args[pr.Stage] = strings.Join(pr.Args, " ")
		}
		if pr.Kind == plan.NodeAgent {
			agent = strings.Join(pr.Args, " ")
		}
	}
	// The host's simulated nodes take their pod CIDRs from its own
	// cluster CIDR, not from the one every host would number from.
	if !strings.Contains(agent, "--cluster-cidr 10.245.0.0/16") {
		t.Errorf("node agent: args %q, want the host's cluster CIDR", agent)
	}
	for _, s := range pipeline.Stages {
		if !strings.Contains(args[s], "--replica "+s+"-h2") {
			t.Errorf("stage %s: args %q, want its replica %s-h2", s, args[s], s)
		}
	}
	if got, want := args[pipeline.RootCACert], "--root-ca-file "+p.Layout.PKI("ca.crt"); !strings.Contains(got, want) {
		t.Errorf("rootcacert: args %q, want %q", got, want)
	}
	if got := args[pipeline.NodeLifecycle]; !strings.Contains(got, "--node-monitor-grace-period 20s") {
		t.Errorf("nodelifecycle: args %q, want the grace period", got)
	}
}

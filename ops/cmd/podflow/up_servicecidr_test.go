package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/roles"
	"github.com/podflow/podflow/ops/processes/up"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/pipeline"
)

// TestServiceCIDROneSetting: `podflow up --service-cluster-ip-range`
// reaches, through the processes' own command lines, both the api replica
// (whose allocator hands out ClusterIPs in it) and the Linux node agent
// (whose proxy gets it: roles' TestProxyConfigServiceCIDR and the proxy's
// TestKernelServiceCIDR take it from there).
func TestServiceCIDROneSetting(t *testing.T) {
	const cidr = "10.100.0.0/24"
	n := 9100
	p, err := plan.New(plan.Options{
		Exe: "/bin/podflow", DataDir: t.TempDir(), NATSPort: 4222,
		StoreAddrs: []string{"127.0.0.1:7001"}, StoreUser: bus.UserCredential{User: "store", Password: "pw"},
		Replicas: map[string]int{pipeline.API: 1}, Runtime: plan.RuntimeLinux, NodeGrace: 40 * time.Second,
		ServiceCIDR: cidr,
		FreeAddr:    func() (string, error) { n++; return fmt.Sprintf("127.0.0.1:%d", n), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	var apiArgs, nodeArgs []string
	for _, pr := range p.Processes() {
		switch {
		case pr.Stage == pipeline.API:
			apiArgs = pr.Args
		case pr.Kind == plan.NodeAgent:
			nodeArgs = pr.Args
		}
	}

	// The api replica, as `podflow stage` parses its arguments.
	var so roles.StageOptions
	cmd := stageCmd(func(_ context.Context, _ string, o roles.StageOptions) error { so = o; return nil })
	cmd.SetArgs(apiArgs[1:])
	cmd.SetOut(io.Discard)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("stage %v: %v", apiArgs, err)
	}
	cfg, err := roles.APIConfig(so)
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := ipalloc.New(cfg.Services)
	if err != nil {
		t.Fatal(err)
	}
	st := objects.FromKV(objectstest.New())
	for i := range 5 {
		svc := &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("s%d", i)},
			Spec: &corev1.ServiceSpec{Ports: []*corev1.ServicePort{{Port: 80}}}}
		if _, err := alloc.Create(context.Background(), st, svc); err != nil {
			t.Fatal(err)
		}
		if ip := netip.MustParseAddr(svc.GetSpec().GetClusterIp()); !netip.MustParsePrefix(cidr).Contains(ip) {
			t.Fatalf("ClusterIP %s outside %s", ip, cidr)
		}
	}

	// The node agent, as `podflow nodeagent` parses its arguments.
	lo := parseNodeAgentArgs(t, nodeArgs)
	if lo.ServiceCIDR != cidr {
		t.Fatalf("node agent's service CIDR %q, want %q", lo.ServiceCIDR, cidr)
	}
}

// TestServiceCIDRRefused: a bad --service-cluster-ip-range is refused, the
// flag named, before anything starts (resolveRuntime is up's first step).
func TestServiceCIDRRefused(t *testing.T) {
	for cidr, want := range map[string]string{
		"10.96.0.1/16": "host bits set",
		"fd00::/108":   "only IPv4",
		"10.0.0.0/7":   "between 8 and 28",
		"10.96.0.0/29": "between 8 and 28",
		"services":     "ParsePrefix",
		"":             "ParsePrefix",
	} {
		t.Run(cidr, func(t *testing.T) {
			o := &up.Options{ServiceCIDR: cidr, StoreReplicas: 3, Runtime: plan.RuntimeSim}
			err := o.Resolve(io.Discard)
			if err == nil || !strings.Contains(err.Error(), "--service-cluster-ip-range") || !strings.Contains(err.Error(), want) {
				t.Fatalf("Resolve = %v, want an error naming the flag and %q", err, want)
			}
		})
	}
	o := &up.Options{ServiceCIDR: plan.DefaultServiceCIDR, StoreReplicas: 3, Runtime: plan.RuntimeSim}
	if err := o.Resolve(io.Discard); err != nil {
		t.Fatalf("default: %v", err)
	}
}

// TestAllowHostPathReachesTheNode: `podflow up --allow-host-path` reaches
// the Linux node agent through its command line (the only directories its
// hostPath volumes may use, and create under for DirectoryOrCreate); up
// refuses it for simulated nodes, a host of several, or a relative path.
func TestAllowHostPathReachesTheNode(t *testing.T) {
	n := 9200
	p, err := plan.New(plan.Options{
		Exe: "/bin/podflow", DataDir: t.TempDir(), NATSPort: 4222,
		StoreAddrs: []string{"127.0.0.1:7001"}, StoreUser: bus.UserCredential{User: "store", Password: "pw"},
		Replicas: map[string]int{pipeline.API: 1}, Runtime: plan.RuntimeLinux, NodeGrace: 40 * time.Second,
		HostPaths: []string{"/tmp/job-e2e", "/srv/data"},
		FreeAddr:  func() (string, error) { n++; return fmt.Sprintf("127.0.0.1:%d", n), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	var nodeArgs []string
	for _, pr := range p.Processes() {
		if pr.Kind == plan.NodeAgent {
			nodeArgs = pr.Args
		}
	}
	lo := parseNodeAgentArgs(t, nodeArgs)
	if fmt.Sprint(lo.HostPaths) != "[/tmp/job-e2e /srv/data]" {
		t.Fatalf("the node agent's hostPath directories: %v", lo.HostPaths)
	}

	for name, o := range map[string]*up.Options{
		"simulated nodes": {Runtime: plan.RuntimeSim, HostPaths: []string{"/tmp/x"}},
		"a joining host":  {Runtime: plan.RuntimeSim, Join: "10.0.0.1", HostPaths: []string{"/tmp/x"}},
		"a relative path": {Runtime: plan.RuntimeLinux, HostPaths: []string{"tmp/x"}},
	} {
		o.ServiceCIDR, o.StoreReplicas = plan.DefaultServiceCIDR, 3
		if err := o.Resolve(io.Discard); err == nil || !strings.Contains(err.Error(), "--allow-host-path") {
			t.Errorf("%s: Resolve = %v, want an error naming --allow-host-path", name, err)
		}
	}
}

// parseNodeAgentArgs parses args (`nodeagent …`) as `podflow nodeagent`
// does, into the Linux node's options.
func parseNodeAgentArgs(t *testing.T, args []string) roles.LinuxNodeOptions {
	t.Helper()
	var lo roles.LinuxNodeOptions
	ncmd := nodeAgentCmd(func(_ context.Context, o roles.LinuxNodeOptions) error { lo = o; return nil })
	ncmd.SetArgs(args[1:])
	ncmd.SetOut(io.Discard)
	if err := ncmd.Execute(); err != nil {
		t.Fatalf("nodeagent %v: %v", args, err)
	}
	return lo
}

// TestLinuxNodesRefused: --linux-nodes beyond one is for the Linux runtime
// of a single-host up, and bounded; up refuses otherwise before starting
// anything, naming the flag.
func TestLinuxNodesRefused(t *testing.T) {
	for name, o := range map[string]*up.Options{
		"simulated nodes": {Runtime: plan.RuntimeSim, LinuxNodes: 2},
		"a joining host":  {Runtime: plan.RuntimeLinux, Join: "10.0.0.1", LinuxNodes: 2},
		"the first host":  {Runtime: plan.RuntimeLinux, Init: true, LinuxNodes: 2},
		"too many":        {Runtime: plan.RuntimeLinux, LinuxNodes: plan.MaxLinuxNodes + 1},
		"negative":        {Runtime: plan.RuntimeLinux, LinuxNodes: -1},
	} {
		t.Run(name, func(t *testing.T) {
			o.ServiceCIDR, o.StoreReplicas = plan.DefaultServiceCIDR, 3
			if err := o.Resolve(io.Discard); err == nil || !strings.Contains(err.Error(), "--linux-nodes") {
				t.Fatalf("Resolve = %v, want an error naming --linux-nodes", err)
			}
		})
	}
}

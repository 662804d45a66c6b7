package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/podflow/podflow/nodeagent/nodemetrics"
	"github.com/podflow/podflow/services/nodeexec"
	"github.com/podflow/podflow/services/nodelogs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/dns"
	"github.com/podflow/podflow/nodeagent/linux/network"
	"github.com/podflow/podflow/nodeagent/linux/proxy"
	"github.com/podflow/podflow/ops/client"
	wire "github.com/podflow/podflow/ops/processes/nodewire"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/podmetrics"
	"github.com/podflow/podflow/services/stage"
)

// LinuxNodeOptions configure one real node (`podflow nodeagent --runtime
// linux`).
type LinuxNodeOptions struct {
	NodeAgentOptions
	Node        string // the node's name (default: the host name)
	DataDir     string // pods, images, IPAM (default .podflow/nodes/NODE)
	PodCIDR     string // default: the next free block of ClusterCIDR, recorded in the store
	ClusterCIDR string // where pod CIDRs are allocated from ("": 10.244.0.0/16)
	// NodeCIDRMaskSize is the prefix length of an allocated pod CIDR
	// (kube-controller-manager's --node-cidr-mask-size; 0: 24).
	NodeCIDRMaskSize int
	ServiceCIDR      string   // the service CIDR the proxy routes unreachable and programs inside ("": proxy's default)
	Registry         string   // registry standing in for docker.io (empty: docker.io)
	HostIP           string   // the node's InternalIP ("": its bridge's gateway, the pod CIDR's first address)
	HostPaths        []string // host directories hostPath volumes may use
	Decommission     bool     // remove every pod, the bridge and the cgroups, then return
	// SeccompDefault makes RuntimeDefault the profile of containers that
	// name none (kubelet --seccomp-default).
	SeccompDefault bool
	// SeccompProfileRoot is where Localhost profiles are (kubelet
	// --seccomp-profile-root; default DATA_DIR/seccomp).
	SeccompProfileRoot string
	// AllowedUnsafeSysctls are sysctl patterns ("net.core.*") pods may set
	// beyond the safe set (kubelet --allowed-unsafe-sysctls).
	AllowedUnsafeSysctls []string
	// ContainerLogMaxSize and ContainerLogMaxFiles rotate container logs
	// (kubelet's); 0 keeps the defaults, 10 MiB and 5.
	ContainerLogMaxSize  int64
	ContainerLogMaxFiles int
}

// podCIDRPrefix holds one key per allocated pod CIDR; its value is the
// node's name. Create makes an allocation exclusive: two agents never get
// the same CIDR.
const podCIDRPrefix = pipeline.PodCIDRPrefix

func podCIDRKey(p netip.Prefix) string {
	return podCIDRPrefix + strings.ReplaceAll(p.String(), "/", "-")
}

// allocatePodCIDR returns node's pod CIDR: the one it holds already, the
// one asked for (if free or its own), or the first free block of mask bits
// of cluster that overlaps none of local (the pod CIDRs other node agents
// on this machine serve, perhaps another podflow system's).
func allocatePodCIDR(ctx context.Context, kv *raftstore.Client, node, want, cluster string, mask int, local []netip.Prefix) (string, error) {
	claim := func(p netip.Prefix) (bool, error) {
		_, err := kv.Create(ctx, podCIDRKey(p), []byte(node))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, raftstore.ErrAlreadyExists) {
			return false, err
		}
		cur, err := kv.Get(ctx, podCIDRKey(p))
		if err != nil {
			return false, err
		}
		return string(cur.Value) == node, nil
	}
	if want != "" {
		p, err := netip.ParsePrefix(want)
		if err != nil || p.Masked() != p {
			return "", fmt.Errorf("--pod-cidr %q is not a network prefix", want)
		}
		ok, err := claim(p)
		if err != nil {
			return "", fmt.Errorf("claim pod CIDR %s: %w", p, err)
		}
		if !ok {
			return "", fmt.Errorf("pod CIDR %s belongs to another node", p)
		}
		return p.String(), nil
	}
	kvs, _, err := kv.List(ctx, podCIDRPrefix)
	if err != nil {
		return "", fmt.Errorf("list pod CIDRs: %w", err)
	}
	for _, e := range kvs {
		if string(e.Value) == node {
			return strings.ReplaceAll(strings.TrimPrefix(e.Key, podCIDRPrefix), "-", "/"), nil
		}
	}
	cl, err := netip.ParsePrefix(cluster)
	if err != nil || !cl.Addr().Is4() || mask < cl.Bits() || mask > 29 {
		return "", fmt.Errorf("--cluster-cidr %q must be an IPv4 prefix of /%d or wider, and --node-cidr-mask-size %d at most 29", cluster, mask, mask)
	}
	// Node i gets the i-th block; the first is left out (as kube-controller
	// manager's allocator starts after the network address).
	base := cl.Masked().Addr().As4()
	for i := 1; i < 1<<min(mask-cl.Bits(), 24); i++ {
		n := (uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])) + uint32(i)<<(32-mask)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), mask)
		if slices.ContainsFunc(local, p.Overlaps) {
			continue
		}
		ok, err := claim(p)
		if err != nil {
			return "", fmt.Errorf("claim pod CIDR %s: %w", p, err)
		}
		if ok {
			return p.String(), nil
		}
	}
	return "", fmt.Errorf("no free /%d left in %s", mask, cl)
}

// LinuxNode runs one real node until ctx is done: the Linux runtime, the
// agent core, its consumer, and the logs, exec and metrics responders.
func LinuxNode(ctx context.Context, lo LinuxNodeOptions) error {
	if err := linux.Check(); err != nil {
		return err
	}
	node := lo.Node
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node: %w", err)
		}
		node = h
	}
	dataDir := lo.DataDir
	if dataDir == "" {
		dataDir = filepath.Join(".podflow", "nodes", node)
	}
	dataDir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	sess, err := client.Open(ctx, lo.Config, "nodeagent-"+node)
	if err != nil {
		return err
	}
	defer sess.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("nodeagent", node)

	local, err := network.LocalPodCIDRs(node)
	if err != nil {
		return err
	}
	if lo.ClusterCIDR == "" {
		lo.ClusterCIDR = "10.244.0.0/16"
	}
	if lo.NodeCIDRMaskSize == 0 {
		lo.NodeCIDRMaskSize = 24
	}
	podCIDR, err := allocatePodCIDR(ctx, sess.Store.Client(), node, lo.PodCIDR, lo.ClusterCIDR, lo.NodeCIDRMaskSize, local)
	if err != nil {
		return err
	}
	rcfg := linux.DefaultConfig(node, podCIDR, dataDir, lo.Registry)
	rcfg.Network.ClusterCIDR = lo.ClusterCIDR
	// ClusterFirst pods ask the node's cluster DNS, on the bridge's gateway.
	rcfg.ClusterDNS = []string{gatewayOf(podCIDR).String()}
	rcfg.HostPathPrefixes = lo.HostPaths
	// The node's address is its bridge's gateway unless told otherwise:
	// reachable from its pods and from the host, where its NodePort
	// Services and hostPorts answer (kube-proxy serves no node port on
	// loopback).
	hostIP := lo.HostIP
	if hostIP == "" {
		hostIP = gatewayOf(podCIDR).String()
	}
	rcfg.NodeIP = hostIP
	if a, err := netip.ParseAddr(hostIP); err == nil && a.Is4() && !a.IsLoopback() && !a.IsUnspecified() && a != gatewayOf(podCIDR) {
		rcfg.Network.HostIPs = []string{hostIP} // hostPorts answer there too
	}
	rcfg.SeccompDefault = lo.SeccompDefault
	if lo.SeccompProfileRoot != "" {
		rcfg.SeccompProfileRoot = lo.SeccompProfileRoot
	}
	rcfg.AllowedUnsafeSysctls = lo.AllowedUnsafeSysctls
	if lo.ContainerLogMaxSize > 0 {
		rcfg.ContainerLogMaxSize = lo.ContainerLogMaxSize
	}
	if lo.ContainerLogMaxFiles > 0 {
		rcfg.ContainerLogMaxFiles = lo.ContainerLogMaxFiles
	}
	rcfg.Logger = log
	rt, err := linux.New(rcfg)
	if err != nil {
		return err
	}
	defer rt.Close()
	pcfg := proxyConfig(node, podCIDR, lo.ServiceCIDR, hostIP, rcfg)
	if lo.Decommission {
		if err := errors.Join(rt.Decommission(ctx), proxy.Remove(pcfg)); err != nil {
			return err
		}
		log.Info("node decommissioned: no pod, bridge or cgroup of it is left")
		return nil
	}
	log.Info("linux runtime ready", "podCIDR", podCIDR, "dataDir", dataDir, "instance", linux.InstanceOf(dataDir), "bridge", rcfg.Network.BridgeName)

	acfg := nodeagent.DefaultConfig(node, podCIDR)
	acfg.HostIP = hostIP
	// Kept back for the system and the agent, like kubelet's --system-reserved.
	acfg.Reserved = map[string]string{"cpu": "100m", "memory": "256Mi", "pods": "0"}
	acfg.Logger = log
	serviceEnv := nodeagent.NewServiceCache() // containers' Service variables, fed by the Service watch below
	acfg.Services = serviceEnv
	acfg.Labels = map[string]string{"node.podflow.io/runtime": "linux", "kubernetes.io/hostname": node}
	m := stage.NewMetrics("nodeagent")
	nm, err := nodemetrics.New(m.Registry)
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(acfg, nm.Runtime(rt), wire.NewStore(sess.Store).WithTokens(sess.Bus.NATS()), nm.Publisher(wire.NewPublisher(sess.Bus)))
	if err != nil {
		return err
	}
	rc := pipeline.NodeAgentRunnerConfig(node)
	if err := provisionAgent(ctx, sess, rc, lo.Provision); err != nil {
		return err
	}
	rc.Observer = m
	if lo.Metrics != "" {
		addr, err := stage.ServeMetrics(ctx, lo.Metrics, m)
		if err != nil {
			return err
		}
		log.Info("serving metrics", "addr", "http://"+addr+"/metrics")
	}
	sub, err := nodelogs.Serve(ctx, sess.Bus.NATS(), node, func(req nodelogs.Request, max int) (nodelogs.Reply, error) {
		return readLog(agent, req, max)
	})
	if err != nil {
		return fmt.Errorf("serve logs: %w", err)
	}
	defer sub.Unsubscribe()
	execs, err := nodeexec.Serve(sess.Bus.NATS(), nodeexec.DefaultConfig(), node, linuxExec{rt}, log)
	if err != nil {
		return err
	}
	defer execs.Stop()

	meter := rt.NewMeter()
	readings, err := podmetrics.Serve(ctx, sess.Bus.NATS(), node, func(node string) (podmetrics.Reading, error) {
		return linuxReading(node, meter.Last())
	})
	if err != nil {
		return fmt.Errorf("serve metrics: %w", err)
	}
	defer func() { _ = readings.Unsubscribe() }()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sampleUsage(ctx, meter, log)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := agent.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			runErr = err
			cancel()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		peerRoutes(ctx, sess, rt, node, log)
	}()
	// kubectl debug's ephemeral containers, at once (no event announces them).
	pw, err := wire.NewPodWatch(sess.Store, agent, node, log)
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := pw.Run(ctx); err != nil {
			log.Warn("pod watch stopped: ephemeral containers wait for the next reconcile", "err", err)
		}
	}()
	// The service proxy (the service CIDR's unreachable route first) and
	// the cluster DNS, fed by one watch. Pods run without them when the
	// kernel lacks nftables or port 53 is taken: ClusterIPs then stay
	// unreachable, or names unresolved; nothing else changes.
	syncers := wire.Syncers{serviceEnv}
	if px, err := proxy.New(ctx, pcfg); err != nil {
		log.Warn("no service proxy: ClusterIPs are unreachable on this node", "err", err)
	} else {
		defer px.Close()
		log.Info("service proxy ready", "table", pcfg.Table, "serviceCIDR", pcfg.ServiceCIDR)
		syncers = append(syncers, px)
	}
	if ds, err := startClusterDNS(podCIDR, rcfg); err != nil {
		log.Warn("no cluster DNS: pods' names do not resolve on this node", "err", err)
	} else {
		defer ds.Close()
		log.Info("cluster DNS ready", "addr", ds.Addr(), "device", rcfg.Network.BridgeName)
		syncers = append(syncers, ds)
	}
	if len(syncers) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := wire.WatchServices(ctx, sess.Store, syncers, wire.ServiceWatchConfig{Logger: log}); err != nil {
				log.Warn("service watch stopped", "err", err)
			}
		}()
	}
	if err := stage.AnswerPings(ctx, sess.Bus, stage.Env{Stage: "nodeagent", Replica: rc.Consumer}, m); err != nil {
		cancel()
		wg.Wait()
		return err
	}
	runner, err := bus.NewRunner(sess.Bus, rc, nm.Handler(wire.Handler(sess.Store, agent, acfg.SpecSecond)))
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	err = runner.Run(ctx)
	cancel()
	wg.Wait()
	if runErr != nil {
		return runErr
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// gatewayOf is the pod CIDR's first address, the bridge's.
func gatewayOf(podCIDR string) netip.Addr { return netip.MustParsePrefix(podCIDR).Addr().Next() }

// startClusterDNS starts the node's cluster DNS on the bridge's gateway,
// port 53, bound to the bridge: only the node's pods reach it. It never
// forwards (nodeagent/linux/dns).
func startClusterDNS(podCIDR string, rcfg linux.Config) (*dns.Server, error) {
	cfg := dns.DefaultConfig()
	cfg.Addr = net.JoinHostPort(gatewayOf(podCIDR).String(), "53")
	cfg.Device = rcfg.Network.BridgeName
	cfg.Domain = rcfg.ClusterDomain
	s, err := dns.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// proxyConfig is the node proxy's: the service CIDR ("" keeps the
// default), the node's bridge, its gateway (the pod CIDR's first address)
// and its policy routing table; node ports on the gateway and on hostIP,
// the node's InternalIP, unless that is a loopback address.
func proxyConfig(node, podCIDR, serviceCIDR, hostIP string, rcfg linux.Config) proxy.Config {
	cfg := proxy.DefaultConfig(node, rcfg.Network.BridgeName, gatewayOf(podCIDR).String())
	if serviceCIDR != "" {
		cfg.ServiceCIDR = serviceCIDR
	}
	if a, err := netip.ParseAddr(hostIP); err == nil && a.Is4() && !a.IsLoopback() && !a.IsUnspecified() && hostIP != cfg.Gateway {
		cfg.NodeIPs = append(cfg.NodeIPs, hostIP)
	}
	cfg.PodCIDR, cfg.RouteTable = podCIDR, rcfg.Network.RouteTable
	return cfg
}

// peerRoutes keeps a route to the pod CIDR of every other Linux node
// agent, so that pods reach each other across nodes without NAT: to the
// pod CIDR of a node on this machine through the host (its bridge), and
// to that of a node on another host of the cluster via that host's
// address (host-gw, network.Manager.SetHostRoutes). It re-checks every
// few seconds, so a node that starts later, whose bridge was recreated or
// whose host joined or left, is routed to. It reads the pod CIDR
// allocations (only Linux node agents make them) and the hosts' records
// (only the first server writes them), not the Nodes: a node's identity
// reads only its own Node (pipeline.StoreReadFilter).
func peerRoutes(ctx context.Context, sess *client.Session, rt *linux.Runtime, self string, log *slog.Logger) {
	routed := map[string]bool{}
	var lastErr string
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	for {
		allocs, _, err := sess.Store.Client().List(ctx, podCIDRPrefix, raftstore.Stale())
		var hostKVs []*raftstore.KV
		if err == nil {
			hostKVs, _, err = sess.Store.Client().List(ctx, pipeline.HostPrefix, raftstore.Stale())
		}
		if err == nil {
			var remote []podCIDRAlloc
			for _, kv := range allocs {
				a := podCIDRAlloc{node: string(kv.Value), cidr: strings.ReplaceAll(strings.TrimPrefix(kv.Key, podCIDRPrefix), "-", "/")}
				if a.node == self {
					continue
				}
				if err := rt.Network().AddPeerRoute(ctx, a.cidr, ""); err != nil {
					remote = append(remote, a)
					continue
				}
				if !routed[a.cidr] {
					log.Info("routing to a peer node's pods", "node", a.node, "cidr", a.cidr)
					routed[a.cidr] = true
				}
			}
			routes, hosts := hostGWRoutes(remote, hostKVs, self)
			err := rt.Network().SetHostRoutes(ctx, routes, hosts)
			if msg := fmt.Sprint(err); err != nil && msg != lastErr && ctx.Err() == nil {
				log.Warn("host-gw routes", "err", err)
			}
			lastErr = fmt.Sprint(err)
			for _, r := range routes {
				if key := r.String(); !routed[key] {
					log.Info("routing to a node's pods on another host", "route", key)
					routed[key] = true
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// podCIDRAlloc is one pod CIDR allocation: its CIDR and the node that
// holds it.
type podCIDRAlloc struct{ node, cidr string }

// hostRecord is what a node agent reads of a host's record (under
// pipeline.HostPrefix; up.HostRecord).
type hostRecord struct {
	Name      string `json:"name"`
	Advertise string `json:"advertise"`
}

// hostGWRoutes returns the host-gw routes of node self for the
// allocations not on this machine: a node named as a host of the cluster
// (up --init/--join run one node, named after the host) other than
// self is reached via that host's advertised address. It also returns
// every host's address: the only gateways SetHostRoutes accepts.
// Allocations of nodes that are no host, and unreadable records, are
// left out.
func hostGWRoutes(remote []podCIDRAlloc, hostKVs []*raftstore.KV, self string) ([]network.HostRoute, []netip.Addr) {
	byName := map[string]netip.Addr{}
	var hosts []netip.Addr
	for _, kv := range hostKVs {
		var h hostRecord
		if json.Unmarshal(kv.Value, &h) != nil || h.Name != strings.TrimPrefix(kv.Key, pipeline.HostPrefix) {
			continue
		}
		a, err := netip.ParseAddr(h.Advertise)
		if err != nil || !a.Is4() {
			continue
		}
		byName[h.Name] = a
		hosts = append(hosts, a)
	}
	var routes []network.HostRoute
	for _, a := range remote {
		via, ok := byName[a.node]
		cidr, err := netip.ParsePrefix(a.cidr)
		if !ok || a.node == self || err != nil {
			continue
		}
		routes = append(routes, network.HostRoute{CIDR: cidr, Via: via})
	}
	return routes, hosts
}

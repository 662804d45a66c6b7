package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// ClusterConfig configures a Cluster of simulated nodes.
type ClusterConfig struct {
	// Nodes is how many nodes to simulate.
	Nodes int
	// NamePrefix names node i (from 1) NamePrefix + "%04d": sim-node-0001.
	NamePrefix string
	// ClusterCIDR holds every node's pod CIDR (kube-controller-manager's
	// --cluster-cidr), cut into blocks of NodeCIDRMaskSize bits
	// (--node-cidr-mask-size): node i gets block i, the first block being
	// left out as the Linux node's allocator does (10.244.0.0/16 with /24:
	// sim-node-0001 has 10.244.1.0/24). It must hold Nodes blocks after the
	// first; SizedClusterCIDR picks one that does.
	ClusterCIDR      string
	NodeCIDRMaskSize int
	// HostIPBase is counted from the same way, one address per node.
	HostIPBase string
	// Labels and Taints are applied to every node; Runtime and Agent are
	// templates (PodCIDR, NodeName, HostIP and Clock are set per node).
	Labels  map[string]string
	Taints  []*corev1.Taint
	Runtime Config
	Agent   nodeagent.Config
	// Parallelism bounds how many nodes register, reconcile or heartbeat
	// (Cluster.Heartbeat) at once; the loop's paced heartbeats have their
	// own bound, HeartbeatsInFlight.
	Parallelism int
}

// DefaultClusterCIDR and DefaultNodeCIDRMaskSize are where simulated
// nodes' pod CIDRs come from when the cluster fits: kind's pod subnet and
// kube-controller-manager's default IPv4 mask.
const (
	DefaultClusterCIDR      = "10.244.0.0/16"
	DefaultNodeCIDRMaskSize = 24
)

// SizedClusterCIDR returns DefaultClusterCIDR, widened one bit at a time
// (10.244.0.0/15, /14, 10.240.0.0/13, …) until it holds nodes blocks of
// mask bits after the first: 10.244.0.0/16 up to 255 nodes of /24,
// 10.224.0.0/11 for 5,000. It never goes past 10.0.0.0/8; Validate says
// when even that is too small.
func SizedClusterCIDR(nodes, mask int) string {
	p := netip.MustParsePrefix(DefaultClusterCIDR)
	for p.Bits() > 8 && p.Bits() <= mask && mask-p.Bits() < 31 && nodes > 1<<(mask-p.Bits())-1 {
		p = netip.PrefixFrom(p.Addr(), p.Bits()-1).Masked()
	}
	return p.String()
}

// WithCIDRs returns c with its pod CIDRs from cluster in blocks of mask
// bits: "" sizes the cluster CIDR for c.Nodes (SizedClusterCIDR), 0 keeps
// c's mask.
func (c ClusterConfig) WithCIDRs(cluster string, mask int) ClusterConfig {
	if mask != 0 {
		c.NodeCIDRMaskSize = mask
	}
	c.ClusterCIDR = cluster
	if cluster == "" {
		c.ClusterCIDR = SizedClusterCIDR(c.Nodes, c.NodeCIDRMaskSize)
	}
	return c
}

// DefaultClusterConfig returns n instant nodes of 8 cpu, 32Gi and 110 pods
// with the kubelet's timings, their pod CIDRs /24s of a cluster CIDR sized
// for n (SizedClusterCIDR).
func DefaultClusterConfig(n int) ClusterConfig {
	return ClusterConfig{
		Nodes:            n,
		NamePrefix:       "sim-node-",
		ClusterCIDR:      SizedClusterCIDR(n, DefaultNodeCIDRMaskSize),
		NodeCIDRMaskSize: DefaultNodeCIDRMaskSize,
		HostIPBase:       "172.16.0.0",
		Labels:           map[string]string{"type": "sim"},
		Runtime:          DefaultConfig(""),
		Agent:            nodeagent.DefaultConfig("", ""),
		Parallelism:      16,
	}
}

// Validate checks the configuration, including that every node's CIDR and
// host IP exist.
func (c ClusterConfig) Validate() error {
	if c.Nodes < 1 || c.Parallelism < 1 || c.NamePrefix == "" {
		return fmt.Errorf("sim: cluster: need Nodes (%d) >= 1, Parallelism (%d) >= 1 and a NamePrefix", c.Nodes, c.Parallelism)
	}
	if _, err := c.podCIDR(c.Nodes); err != nil {
		return err
	}
	if _, err := c.hostIP(c.Nodes); err != nil {
		return err
	}
	return c.node(1).agent.Validate()
}

// NodePodCIDR is node i's (from 1) pod CIDR: block i of the cluster CIDR.
func (c ClusterConfig) NodePodCIDR(i int) (netip.Prefix, error) { return c.podCIDR(i) }

func (c ClusterConfig) podCIDR(i int) (netip.Prefix, error) {
	cluster, err := netip.ParsePrefix(c.ClusterCIDR)
	if err != nil || !cluster.Addr().Is4() || cluster.Masked() != cluster {
		return netip.Prefix{}, fmt.Errorf("sim: cluster: cluster CIDR %q is not an IPv4 network address/prefix", c.ClusterCIDR)
	}
	mask := c.NodeCIDRMaskSize
	if mask < cluster.Bits() || mask > 30 {
		return netip.Prefix{}, fmt.Errorf("sim: cluster: node CIDR mask size %d must lie between the cluster CIDR's %d and 30", mask, cluster.Bits())
	}
	if blocks := uint64(1) << (mask - cluster.Bits()); uint64(i) >= blocks {
		return netip.Prefix{}, fmt.Errorf("sim: cluster: cluster CIDR %s holds %d node CIDRs of /%d after the first, fewer than node %d: give a wider cluster CIDR or a longer node CIDR mask",
			cluster, blocks-1, mask, i)
	}
	a, err := offset(cluster.Addr(), uint32(i)<<(32-mask))
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("sim: cluster: pod CIDR of node %d: %w", i, err)
	}
	return netip.PrefixFrom(a, mask), nil
}

func (c ClusterConfig) hostIP(i int) (netip.Addr, error) {
	base, err := netip.ParseAddr(c.HostIPBase)
	if err != nil || !base.Is4() {
		return netip.Addr{}, fmt.Errorf("sim: cluster: HostIPBase %q is not an IPv4 address", c.HostIPBase)
	}
	a, err := offset(base, uint32(i))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("sim: cluster: host IP of node %d: %w", i, err)
	}
	return a, nil
}

// offset adds n to a, refusing to leave a's /8.
func offset(a netip.Addr, n uint32) (netip.Addr, error) {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	w := v + n
	if w < v || w>>24 != v>>24 {
		return netip.Addr{}, fmt.Errorf("%s + %d leaves %d.0.0.0/8", a, n, b[0])
	}
	return netip.AddrFrom4([4]byte{byte(w >> 24), byte(w >> 16), byte(w >> 8), byte(w)}), nil
}

type nodeSpec struct {
	agent   nodeagent.Config
	runtime Config
}

func (c ClusterConfig) node(i int) nodeSpec {
	cidr, _ := c.podCIDR(i)
	ip, _ := c.hostIP(i)
	a := c.Agent
	a.NodeName = fmt.Sprintf("%s%04d", c.NamePrefix, i)
	a.PodCIDR, a.HostIP = cidr.String(), ip.String()
	a.Labels = maps.Clone(c.Labels)
	a.Taints = c.Taints
	r := c.Runtime
	r.PodCIDR, r.Clock = cidr.String(), a.Clock
	return nodeSpec{agent: a, runtime: r}
}

// Cluster runs many simulated nodes in one process, each an Agent over its
// own Runtime. Idle nodes cost no goroutine: one loop heartbeats them all,
// spread over the heartbeat interval, and one reconciles them, with at
// most Parallelism in flight.
type Cluster struct {
	cfg    ClusterConfig
	store  nodeagent.NodeStore
	names  []string
	agents map[string]*nodeagent.Agent
	rts    map[string]*Runtime

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// ClusterPoolSize is the most pod workers' steps a Cluster runs at once
// across all its nodes when ClusterConfig.Agent.Pool is nil. A step
// waits for its reports' publish acknowledgements, so a small bound would
// let a slow bus, not the CPU, cap pods/s; the pool's goroutines exist
// only while steps are due.
const ClusterPoolSize = 4 * nodeagent.DefaultPoolSize

// NewCluster builds the nodes; nothing runs until Start.
func NewCluster(cfg ClusterConfig, store nodeagent.NodeStore, pub nodeagent.Publisher) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Agent.Pool == nil {
		// One pool for every node: the pods worked on at once, across
		// the whole cluster; an idle pod holds no goroutine.
		cfg.Agent.Pool = nodeagent.NewPool(ClusterPoolSize)
	}
	c := &Cluster{cfg: cfg, store: store, agents: map[string]*nodeagent.Agent{}, rts: map[string]*Runtime{}}
	for i := 1; i <= cfg.Nodes; i++ {
		spec := cfg.node(i)
		rt, err := New(spec.runtime)
		if err != nil {
			return nil, err
		}
		a, err := nodeagent.New(spec.agent, rt, store, pub)
		if err != nil {
			return nil, err
		}
		c.names = append(c.names, spec.agent.NodeName)
		c.agents[spec.agent.NodeName], c.rts[spec.agent.NodeName] = a, rt
	}
	return c, nil
}

// Start registers every node (failing if any registration fails) and starts
// the loop that heartbeats every node once per Agent.HeartbeatInterval,
// spread over it, and reconciles every Agent.ResyncPeriod. Stop ends it.
func (c *Cluster) Start(ctx context.Context) error {
	if err := c.each(ctx, func(ctx context.Context, a *nodeagent.Agent) error { return a.Start(ctx) }); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.loop(lctx)
	}()
	return nil
}

func (c *Cluster) loop(ctx context.Context) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		rs := time.NewTicker(c.cfg.Agent.ResyncPeriod)
		defer rs.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-rs.C:
				_ = c.Reconcile(ctx)
			}
		}
	}()
	interval := c.cfg.Agent.HeartbeatInterval
	for ctx.Err() == nil {
		start := time.Now() // a round longer than the interval is not caught up
		c.pacedHeartbeat(ctx, start, interval)
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(interval))):
		}
	}
}

// HeartbeatsInFlight bounds the heartbeats a Cluster's loop runs at once.
// Its rounds are paced (see pacedHeartbeat), so this is reached only when
// a heartbeat's latency times the rate (Nodes / HeartbeatInterval: 500/s
// for 5,000 nodes) exceeds it: 512 lets heartbeats keep their rate up to
// a second of latency at 5,000 nodes.
const HeartbeatsInFlight = 512

// HeartbeatSteps is how many groups a Cluster's loop splits its nodes
// into per heartbeat interval (see pacedHeartbeat).
const HeartbeatSteps = 20

// pacedHeartbeat heartbeats every node once, in HeartbeatSteps groups
// spread evenly over interval (group k at start + k/HeartbeatSteps of
// it), as independent kubelets' timers spread their renewals: the store
// sees a steady rate, not one burst of N every interval that a busy store
// (a pod storm) stretches past the node lifecycle controller's grace
// period. A group's writes still reach the store together, so its raft
// log appends them in few batches: one node at a time (5,000 nodes, 10 s)
// tripled the store's fsyncs and doubled its CPU. At most
// HeartbeatsInFlight run at once. Over a NodeLister the nodes are listed
// once, at the round's start.
func (c *Cluster) pacedHeartbeat(ctx context.Context, start time.Time, interval time.Duration) {
	// byName holds the listed nodes until each one's heartbeat: a node's
	// copy goes as soon as its heartbeat ends, not at the round's end
	// (5,000 decoded nodes are ~17 MB, and the round lasts the interval).
	var byName map[string]*corev1.Node
	if l, ok := c.store.(nodeagent.NodeLister); ok {
		if nodes, err := l.ListNodes(ctx); err == nil {
			byName = make(map[string]*corev1.Node, len(nodes))
			for _, n := range nodes {
				byName[n.GetMetadata().GetName()] = n
			}
		}
	}
	sem := make(chan struct{}, HeartbeatsInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	per := (len(c.names) + HeartbeatSteps - 1) / HeartbeatSteps
	for i, name := range c.names {
		if d := time.Until(start.Add(interval * time.Duration(i/per) / HeartbeatSteps)); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		a := c.agents[name]
		if byName == nil {
			wg.Go(func() {
				defer func() { <-sem }()
				_ = a.Heartbeat(ctx)
			})
			continue
		}
		stored := byName[name]
		delete(byName, name)
		wg.Go(func() {
			defer func() { <-sem }()
			_ = a.HeartbeatNode(ctx, stored)
		})
	}
}

// Heartbeat heartbeats every node, Parallelism at a time. When the store
// is a nodeagent.NodeLister it lists the nodes once for all of them (each
// agent compares its status with its node's, see Agent.Heartbeat).
func (c *Cluster) Heartbeat(ctx context.Context) error {
	l, ok := c.store.(nodeagent.NodeLister)
	if !ok {
		return c.each(ctx, func(ctx context.Context, a *nodeagent.Agent) error { return a.Heartbeat(ctx) })
	}
	nodes, err := l.ListNodes(ctx)
	if err != nil { // each agent reads its own
		return c.each(ctx, func(ctx context.Context, a *nodeagent.Agent) error { return a.Heartbeat(ctx) })
	}
	byName := make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.GetMetadata().GetName()] = n
	}
	return c.each(ctx, func(ctx context.Context, a *nodeagent.Agent) error {
		return a.HeartbeatNode(ctx, byName[a.NodeName()])
	})
}

// Reconcile reconciles every node. When the store is a
// nodeagent.NodePodsLister or a nodeagent.PodLister it lists the pods
// once for all nodes; the former's are decoded one node at a time, as
// each node is reconciled.
func (c *Cluster) Reconcile(ctx context.Context) error {
	bl, lazy := c.store.(nodeagent.NodePodsLister)
	l, ok := c.store.(nodeagent.PodLister)
	if !lazy && !ok {
		return c.each(ctx, func(ctx context.Context, a *nodeagent.Agent) error { return a.Reconcile(ctx) })
	}
	marks := make(map[string]nodeagent.ListMark, len(c.names))
	for _, name := range c.names {
		marks[name] = c.agents[name].ListMark()
	}
	if lazy {
		podsOf, err := bl.ListPodsByNode(ctx)
		if err != nil {
			return fmt.Errorf("sim: list pods: %w", err)
		}
		return c.each(ctx, func(ctx context.Context, a *nodeagent.Agent) error {
			pods, err := podsOf(a.NodeName())
			if err != nil { // not one pod taken for gone
				return err
			}
			return a.ReconcilePods(ctx, marks[a.NodeName()], pods)
		})
	}
	pods, err := l.ListPods(ctx)
	if err != nil {
		return fmt.Errorf("sim: list pods: %w", err)
	}
	byNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		byNode[p.GetSpec().GetNodeName()] = append(byNode[p.GetSpec().GetNodeName()], p)
	}
	return c.each(ctx, func(ctx context.Context, a *nodeagent.Agent) error {
		return a.ReconcilePods(ctx, marks[a.NodeName()], byNode[a.NodeName()])
	})
}

// each runs fn over every node, Parallelism at a time, and joins the errors.
func (c *Cluster) each(ctx context.Context, fn func(context.Context, *nodeagent.Agent) error) error {
	var next atomic.Int64
	errs := make([]error, len(c.names))
	var wg sync.WaitGroup
	for range min(c.cfg.Parallelism, len(c.names)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(c.names) && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				if err := fn(ctx, c.agents[c.names[i]]); err != nil {
					errs[i] = fmt.Errorf("node %q: %w", c.names[i], err)
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}

// Stop stops the loop, every agent and every runtime. Idempotent.
func (c *Cluster) Stop() {
	c.once.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
		c.wg.Wait()
		for _, n := range c.names {
			c.agents[n].Stop()
			c.rts[n].Close()
		}
	})
}

// NodeNames lists the nodes in order.
func (c *Cluster) NodeNames() []string { return slices.Clone(c.names) }

// Agent returns the named node's agent.
func (c *Cluster) Agent(node string) (*nodeagent.Agent, bool) {
	a, ok := c.agents[node]
	return a, ok
}

// Runtime returns the named node's runtime.
func (c *Cluster) Runtime(node string) (*Runtime, bool) {
	r, ok := c.rts[node]
	return r, ok
}

// HandlePodBound hands pod to the agent of its spec.nodeName.
func (c *Cluster) HandlePodBound(ctx context.Context, pod *corev1.Pod) error {
	a, ok := c.agents[pod.GetSpec().GetNodeName()]
	if !ok {
		return fmt.Errorf("sim: pod %q: %w", pod.GetMetadata().GetName(), nodeagent.ErrWrongNode)
	}
	return a.HandlePodBound(ctx, pod)
}

var _ nodeagent.PodTaker = (*Cluster)(nil)

// TakePodBound hands pod over to the agent of its spec.nodeName (see
// nodeagent.Agent.TakePodBound).
func (c *Cluster) TakePodBound(ctx context.Context, pod *corev1.Pod) error {
	a, ok := c.agents[pod.GetSpec().GetNodeName()]
	if !ok {
		return fmt.Errorf("sim: pod %q: %w", pod.GetMetadata().GetName(), nodeagent.ErrWrongNode)
	}
	return a.TakePodBound(ctx, pod)
}

// HandlePodDelete hands a deletion to the agent of the pod's node.
func (c *Cluster) HandlePodDelete(ctx context.Context, pod *corev1.Pod, grace time.Duration) error {
	a, ok := c.agents[pod.GetSpec().GetNodeName()]
	if !ok {
		return fmt.Errorf("sim: pod %q: %w", pod.GetMetadata().GetName(), nodeagent.ErrWrongNode)
	}
	return a.HandlePodDelete(ctx, pod, grace)
}

// HasNode reports whether the cluster simulates node.
func (c *Cluster) HasNode(node string) bool {
	_, ok := c.agents[node]
	return ok
}

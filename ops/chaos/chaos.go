package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/nemesis"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/up"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/services/objects"
)

// Options configure Run (`podflow chaos`).
type Options struct {
	Config       string        // the system's client configuration ("": the configured one, else its own)
	Own          bool          // start a system of its own even when one is configured
	Pods         int           // pods to request
	Duration     time.Duration // how long the workload and the faults last
	KillInterval time.Duration // time between two faults
	Targets      string        // what may be killed: stages, store, nats, nodeagent
	Pause        bool          // also SIGSTOP/SIGCONT processes
	PauseFor     time.Duration // how long a paused process stays stopped
	Seed         uint64        // random seed (0: from the clock; printed)
	Nodes        int           // simulated nodes of its own system
	Settle       time.Duration // how long every pod may take to settle after the chaos
	Nemeses      string        // faults to inject (NemesisNames; "": kill, and pause with Pause)
	NetTargets   string        // whose links the network faults cut: store, nats or store,nats
	FaultFor     time.Duration // how long a network fault lasts
	LinClients   int           // HTTPS clients of the linearizability checker (0: none)
	LinKeys      int           // ConfigMaps those clients share
	Keep         bool          // keep its own system's data directory
	Hosts        int           // a cluster of this many hosts, whole hosts killed (0: one host; hosts.go)
	MaxHostKills int           // with Hosts: at most this many host kills (0: as many as Duration allows)
	Scenario     string        // the workload (ScenarioNames; "" or pods: the pod workload)
	MaxKills     int           // rollout, job: at most this many controller kills (0: as many as Duration allows)
	ScaleTo      int           // rollout: the spec.replicas the Deployment is scaled to during its rollout
	Completions  int           // job: the Job's completions
	Parallelism  int           // job: the Job's parallelism
	Indexed      bool          // job: an Indexed Job
}

// violationsError is Run's error when an invariant broke: the command
// exits 2 (ExitCode).
type violationsError struct{ n int }

func (e violationsError) Error() string { return fmt.Sprintf("%d invariant violation(s)", e.n) }
func (violationsError) ExitCode() int   { return 2 }

// NemesisNames are the faults of --nemesis: process faults (kill, pause)
// and network faults between the store replicas or the NATS servers (the
// rest); loss drops a share of the packets of every link (root: the
// relays then reach their destinations through podflow's network
// namespaces, nemesis.LossyPath); cutkill is a partition with a SIGKILL of a --targets process in
// its middle (a NATS server or a stage killed while the routes are cut:
// Jepsen's NATS case).
var NemesisNames = []string{"kill", "pause", "partition", "leader", "bridge", "oneway", "latency", "flap", "cutkill", "loss"}

// parseNemeses reads --nemesis (default: kill, and pause with --pause)
// and reports whether any is a network fault.
func parseNemeses(spec string, pause bool) (names []string, network bool, err error) {
	if spec == "" {
		spec = "kill"
		if pause {
			spec += ",pause"
		}
	}
	seen := map[string]bool{}
	for _, n := range strings.Split(spec, ",") {
		if n = strings.TrimSpace(n); n == "" || seen[n] {
			continue
		}
		if !slices.Contains(NemesisNames, n) {
			return nil, false, fmt.Errorf("--nemesis: unknown fault %q (%s)", n, strings.Join(NemesisNames, ", "))
		}
		seen[n] = true
		names = append(names, n)
		network = network || (n != "kill" && n != "pause")
	}
	return names, network, nil
}

// parseNetTargets reads --nemesis-target.
func parseNetTargets(spec string, nemeses []string) ([]string, error) {
	var out []string
	for _, t := range strings.Split(spec, ",") {
		if t = strings.TrimSpace(t); t == "" || slices.Contains(out, t) {
			continue
		}
		if t != "store" && t != "nats" {
			return nil, fmt.Errorf("--nemesis-target: unknown target %q (store, nats)", t)
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("--nemesis-target: none given (store, nats)")
	}
	if slices.Equal(out, []string{"nats"}) && slices.Contains(nemeses, "oneway") {
		// A NATS route between two servers is whichever connection of the
		// two they dialled survived: cutting what one dialled is no
		// one-way fault.
		return nil, errors.New("--nemesis oneway: the store's links only (add store to --nemesis-target)")
	}
	return out, nil
}

// chaosNets are the relays of chaos's network faults: the store's raft
// links, and with nats the route links of the NATS servers.
type chaosNets struct {
	store, nats *nemesis.Net
	refusing    *nemesis.Refusing
	paths       []*nemesis.LossyPath
}

func (c *chaosNets) of(target string) *nemesis.Net {
	if target == "nats" {
		return c.nats
	}
	return c.store
}

func (c *chaosNets) heal() error {
	err := c.store.Heal()
	if c.nats != nil {
		err = errors.Join(err, c.nats.Heal())
	}
	return err
}

// Close closes the relays (after the system stopped: its links).
func (c *chaosNets) Close() {
	for _, n := range []*nemesis.Net{c.store, c.nats} {
		if n != nil {
			n.Close()
		}
	}
	if c.refusing != nil {
		c.refusing.Close()
	}
	for _, p := range c.paths {
		p.Close()
	}
}

// chaosNet starts the relays of the store's raft links (and, with nats,
// of the NATS servers' routes) and writes, into the fresh data directory
// dir, the addresses and each process's dial addresses, so that the
// `podflow up` started next routes every directed link through its relay.
// It returns that up's extra arguments (--cluster with nats).
func chaosNet(dir string, replicas int, nats, lossy bool) (*chaosNets, []string, error) {
	c := &chaosNets{}
	var cl up.ClusterFile
	relays := func(prefix string, addrs []string) (*nemesis.Net, map[string]map[string]string, error) {
		targets := map[string]string{}
		for i, a := range addrs {
			targets[fmt.Sprintf("%s-%d", prefix, i+1)] = a
		}
		var path nemesis.Path
		if lossy {
			p, err := nemesis.NewLossyPath(addrs)
			if err != nil {
				return nil, nil, fmt.Errorf("--nemesis loss: %w", err)
			}
			c.paths = append(c.paths, p)
			path = p
		}
		n, err := nemesis.NewVia(targets, path)
		if err != nil {
			return nil, nil, err
		}
		dial := map[string]map[string]string{}
		for id := range targets {
			dial[id] = n.DialAddrs(id)
		}
		return n, dial, nil
	}
	fail := func(err error) (*chaosNets, []string, error) {
		c.Close()
		return nil, nil, err
	}
	var err error
	if cl.StoreAddrs, err = plan.FreeAddrs(replicas); err != nil {
		return fail(err)
	}
	if c.store, cl.StorePeerAddrs, err = relays("store", cl.StoreAddrs); err != nil {
		return fail(err)
	}
	var extra []string
	if nats {
		addrs, err := plan.FreeAddrs(6) // 3 client and 3 route ports
		if err != nil {
			return fail(err)
		}
		for i, a := range addrs {
			_, p, _ := net.SplitHostPort(a)
			port, _ := strconv.Atoi(p)
			if i < 3 {
				cl.ClusterClientPorts = append(cl.ClusterClientPorts, port)
			} else {
				cl.ClusterRoutePorts = append(cl.ClusterRoutePorts, port)
			}
		}
		if c.nats, cl.NATSRoutePeerAddrs, err = relays("nats", addrs[3:]); err != nil {
			return fail(err)
		}
		if c.refusing, err = nemesis.NewRefusing(); err != nil {
			return fail(err)
		}
		cl.NATSRouteAdvertise = c.refusing.Addr()
		extra = []string{"--cluster"}
	}
	if err := up.WriteJSONFile(plan.Layout{Dir: dir}.Cluster(), cl); err != nil {
		return fail(err)
	}
	return c, extra, nil
}

// Run publishes o.Pods pods over o.Duration while injecting o.Nemeses
// into the system, waits for it to settle and checks the invariants (see
// the package doc), printing a report to out. It returns an error with
// ExitCode 2 when an invariant broke.
func Run(ctx context.Context, o *Options, out io.Writer) error {
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed>>1|1))
	if o.Hosts > 0 {
		return runHosts(ctx, o, out, rng)
	}
	if o.Scenario != "" && o.Scenario != "pods" {
		return runScenario(ctx, o, out, rng)
	}
	targets := map[plan.Kind]bool{}
	for _, t := range strings.Split(o.Targets, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		kind, ok := plan.TargetKind(t)
		if !ok {
			return fmt.Errorf("--targets: unknown target %q (stages, store, nats, nodeagent)", t)
		}
		targets[kind] = true
	}
	nemeses, network, err := parseNemeses(o.Nemeses, o.Pause)
	if err != nil {
		return err
	}
	if network && o.Config != "" {
		return errors.New("--nemesis: network faults need chaos to start its own system: leave out --config")
	}
	own := o.Own || network // its own links to cut
	netTargets, err := parseNetTargets(o.NetTargets, nemeses)
	if err != nil {
		return err
	}
	var faults *chaosNets
	var prepare func(string) ([]string, error)
	if network {
		prepare = func(dir string) (extra []string, err error) {
			faults, extra, err = chaosNet(dir, 3, slices.Contains(netTargets, "nats"), slices.Contains(nemeses, "loss"))
			return extra, err
		}
	}
	sess, _, cleanup, err := up.SystemUnderTest(ctx, up.SystemOptions{Config: o.Config, Own: own, Out: out, Nodes: o.Nodes, Replicas: "admission=2,persistence=2,scheduler=2", Keep: o.Keep, Name: "podflow-chaos", Prepare: prepare})
	if faults != nil {
		defer faults.Close() // after the system stopped: its replicas' links
	}
	if err != nil {
		return err
	}
	defer cleanup()
	cfg := sess.Config
	// The faults go into the system's journal too, at the time they
	// happen: the console's timeline marks them (kills and restarts the
	// supervisor records itself).
	var faultLog *plan.Journal
	if cfg.DataDir != "" {
		faultLog = &plan.Journal{Path: plan.Layout{Dir: cfg.DataDir}.Faults()}
	}
	record := func(kind, process string, pid int, detail string) {
		if faultLog != nil {
			_ = faultLog.Append(plan.Happening{Time: time.Now(), Kind: kind, Process: process, PID: pid, Detail: detail})
		}
	}
	fmt.Fprintf(out, "chaos: seed %d, %d pods over %s, a fault every %s among %s (targets %s)\n", o.Seed, o.Pods, o.Duration, o.KillInterval, strings.Join(nemeses, ","), o.Targets)

	prefix := fmt.Sprintf("chaos-%d-", o.Seed%100000)
	start := time.Now()
	type workResult struct {
		acked []string
		err   error
	}
	workDone := make(chan workResult, 1)
	token, err := cfg.BusToken(cfg.Token) // never in clear on the stream
	if err != nil {
		return err
	}
	// The workload stops with this run, also on an early return.
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	go func() {
		acked, err := chaosWorkload(workCtx, sess, token, prefix, o.Pods, o.Duration)
		workDone <- workResult{acked, err}
	}()

	// The register workload of the linearizability checker runs over the
	// HTTPS API until the faults end and the pod workload is done.
	history := nemesis.NewHistory()
	linCtx, stopLin := context.WithCancel(ctx)
	defer stopLin()
	linDone := make(chan error, 1)
	// Two watchers follow the ConfigMaps of the register workload across
	// every fault, restarting from their last revision after each heal:
	// one through the store client's watch, one through the HTTPS API's
	// (resourceVersion and bookmarks, as client-go resumes a watch).
	linPrefix := fmt.Sprintf("lin-%d-", o.Seed%100000)
	watchPrefix := objects.ConfigMaps.Key("default", linPrefix)
	var watchers []*watcher
	var watchInitial map[string]int64
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchWG sync.WaitGroup
	defer func() { stopWatch(); watchWG.Wait() }()
	if o.LinClients > 0 {
		cm, err := newConfigMapClient(cfg.DataDir)
		if err != nil {
			return fmt.Errorf("linearizability checker: %w", err)
		}
		var from int64
		if watchInitial, from, err = keyRevs(ctx, sess.Store.Client(), watchPrefix); err != nil {
			return fmt.Errorf("watch checker: %w", err)
		}
		watchers = []*watcher{
			newWatcher("store client", storeWatch(sess.Store.Client(), watchPrefix), watchPrefix, from),
			newWatcher("HTTPS API", cm.kubeWatch(linPrefix, func(name string) string { return objects.ConfigMaps.Key("default", name) }), watchPrefix, from),
		}
		for _, w := range watchers {
			watchWG.Add(1)
			go func() { defer watchWG.Done(); w.run(watchCtx) }()
		}
		go func() {
			linDone <- registerWorkload(linCtx, cm, history, linPrefix, o.LinClients, o.LinKeys, o.Seed)
		}()
	} else {
		linDone <- nil
	}

	kills, pauses, netFaults := 0, 0, 0
	var order []plan.Kind
	for _, t := range plan.Targets {
		if targets[t.Kind] {
			order = append(order, t.Kind)
		}
	}
	// The first faults visit every target kind (kills) and every nemesis
	// once, so that even a short run has one of each; then the choice is
	// random.
	var first []string
	if slices.Contains(nemeses, "kill") {
		for range order {
			first = append(first, "kill")
		}
	}
	first = append(first, nemeses...)
	elapsed := func() time.Duration { return time.Since(start).Round(time.Second) }
	tick := time.NewTicker(o.KillInterval)
	defer tick.Stop()
	for i := 0; time.Since(start) < o.Duration; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		kind := nemeses[rng.IntN(len(nemeses))]
		if i < len(first) {
			kind = first[i]
		}
		switch kind {
		case "kill", "pause":
			want := targets
			if kind == "kill" && kills < len(order) {
				want = map[plan.Kind]bool{order[kills]: true}
			}
			victim, err := pickVictim(ctx, sess, plan.Layout{Dir: cfg.DataDir}.Children(), want, rng)
			if err != nil {
				fmt.Fprintf(out, "  %6s  no victim: %v\n", elapsed(), err)
				continue
			}
			if kind == "pause" {
				if err := syscall.Kill(victim.PID, syscall.SIGSTOP); err == nil {
					pauses++
					record(plan.HappeningPaused, victim.Name, victim.PID, "SIGSTOP")
					fmt.Fprintf(out, "  %6s  SIGSTOP %s (pid %d) for %s\n", elapsed(), victim.Name, victim.PID, o.PauseFor)
					sleepCtx(ctx, o.PauseFor)
					_ = syscall.Kill(victim.PID, syscall.SIGCONT)
					record(plan.HappeningResumed, victim.Name, victim.PID, "SIGCONT")
				}
				continue
			}
			if err := syscall.Kill(victim.PID, syscall.SIGKILL); err == nil {
				kills++
				fmt.Fprintf(out, "  %6s  SIGKILL %s (pid %d)\n", elapsed(), victim.Name, victim.PID)
			}
		default:
			// The network faults take the targets in turn; oneway is the
			// store's only.
			target := netTargets[netFaults%len(netTargets)]
			if kind == "oneway" {
				target = "store"
			}
			leader := func() string { return storeLeader(ctx, sess) }
			if target == "nats" {
				leader = func() string { return eventsLeader(ctx, sess) }
			}
			nn := faults.of(target)
			f, flap := networkFault(nn, kind, leader(), rng)
			netFaults++
			if flap {
				fmt.Fprintf(out, "  %6s  flap %s every 400ms for %s\n", elapsed(), f, o.FaultFor)
				record(plan.HappeningFault, target, 0, fmt.Sprintf("flap %s", f))
				n, err := nn.Flap(ctx, f, 400*time.Millisecond, o.FaultFor)
				record(plan.HappeningHealed, target, 0, fmt.Sprintf("after %d flaps", n))
				if err != nil && ctx.Err() == nil {
					return fmt.Errorf("nemesis: %w", err)
				}
				fmt.Fprintf(out, "  %6s  healed after %d flaps\n", elapsed(), n)
				restartWatches(watchers)
				continue
			}
			if err := nn.Apply(f); err != nil {
				return fmt.Errorf("nemesis: %w", err)
			}
			record(plan.HappeningFault, target, 0, fmt.Sprint(f))
			fmt.Fprintf(out, "  %6s  %s for %s\n", elapsed(), f, o.FaultFor)
			if kind == "cutkill" {
				sleepCtx(ctx, o.FaultFor/2)
				victim, err := cutKillVictim(ctx, sess, plan.Layout{Dir: cfg.DataDir}.Children(), targets, target, f, nn.Nodes(), rng)
				switch {
				case err != nil:
					fmt.Fprintf(out, "  %6s  no victim during the cut: %v\n", elapsed(), err)
				case syscall.Kill(victim.PID, syscall.SIGKILL) == nil:
					kills++
					fmt.Fprintf(out, "  %6s  SIGKILL %s (pid %d) during the cut\n", elapsed(), victim.Name, victim.PID)
				}
				sleepCtx(ctx, o.FaultFor-o.FaultFor/2)
			} else {
				sleepCtx(ctx, o.FaultFor)
			}
			during := leader()
			if err := nn.Heal(); err != nil {
				return fmt.Errorf("nemesis: %w", err)
			}
			what := "store leader"
			if target == "nats" {
				what = "events stream leader"
			}
			record(plan.HappeningHealed, target, 0, fmt.Sprint(f))
			fmt.Fprintf(out, "  %6s  healed (%s before the heal: %q)\n", elapsed(), what, during)
			restartWatches(watchers)
		}
	}
	if faults != nil {
		if err := faults.heal(); err != nil {
			return fmt.Errorf("nemesis: %w", err)
		}
	}
	work := <-workDone
	if work.err != nil {
		return fmt.Errorf("workload: %w", work.err)
	}
	stopLin()
	if err := <-linDone; err != nil {
		return fmt.Errorf("register workload: %w", err)
	}
	fmt.Fprintf(out, "chaos: %d kills, %d pauses, %d network faults; waiting up to %s for the pods to settle\n", kills, pauses, netFaults, o.Settle)
	if faults != nil {
		for _, t := range netTargets {
			var links []string
			for e, b := range faults.of(t).Stats() {
				links = append(links, fmt.Sprintf("%s %d", e, b))
			}
			sort.Strings(links)
			what := map[string]string{"store": "raft", "nats": "NATS route"}[t]
			fmt.Fprintf(out, "  %s bytes relayed per link: %s\n", what, strings.Join(links, ", "))
		}
	}
	violations := checkInvariants(ctx, sess, prefix, work.acked, o.Settle, out)
	if faults != nil {
		violations += checkRelayed(faults, out)
	}
	if o.LinClients > 0 {
		violations += checkLinearizable(history, o.Seed, out)
		for i, w := range watchers {
			violations += checkWatchRun(ctx, sess, w, watchInitial, fmt.Sprintf("%send%d", linPrefix, i), out)
		}
	}
	if violations > 0 {
		fmt.Fprintf(out, "chaos: FAILED with %d violation(s); replay with --seed %d\n", violations, o.Seed)
		return violationsError{violations}
	}
	fmt.Fprintln(out, "chaos: every invariant holds (0 violations)")
	return nil
}

// networkFault picks the fault of nemesis kind among the nodes of n (the
// store replicas or the NATS servers), leader being the current leader
// ("" unknown): a random node cut off (partition), the leader cut off
// from its followers while it still serves its clients (leader), a
// bridge, the leader unable to reach one follower (oneway), added
// latency, or a node flapping (flap: true).
func networkFault(n *nemesis.Net, kind, leader string, rng *rand.Rand) (f nemesis.Fault, flap bool) {
	nodes := n.Nodes()
	pick := func() string { return nodes[rng.IntN(len(nodes))] }
	others := func(x string) []string {
		var out []string
		for _, n := range nodes {
			if n != x {
				out = append(out, n)
			}
		}
		return out
	}
	known := leader != "" && slices.Contains(nodes, leader)
	if !known {
		leader = pick()
	}
	switch kind {
	case "partition", "cutkill":
		x := pick()
		return nemesis.Partition(nodes, []string{x}, others(x)), false
	case "leader":
		f := nemesis.Isolate(nodes, leader)
		if known {
			f.Name += " (the leader)"
		}
		return f, false
	case "bridge":
		b := pick()
		o := others(b)
		return nemesis.Bridge(nodes, b, o[:1], o[1:]), false
	case "oneway":
		o := others(leader)
		return nemesis.OneWay(leader, o[rng.IntN(len(o))]), false
	case "loss":
		return nemesis.Lose(10 + rng.IntN(31)), false
	case "latency":
		return nemesis.Slow(time.Duration(50+rng.IntN(250))*time.Millisecond, 50*time.Millisecond), false
	default: // flap
		return nemesis.Isolate(nodes, pick()), true
	}
}

// cutKillVictim chooses what cutkill kills while the network fault f
// cuts one node off: with a NATS target and nats among the --targets, a
// NATS server of the majority side (the side that still acknowledges
// writes is then down to one server until the heal); otherwise any
// process of targets.
func cutKillVictim(ctx context.Context, sess *client.Session, children string, targets map[plan.Kind]bool, target string, f nemesis.Fault, nodes []string, rng *rand.Rand) (plan.Record, error) {
	if target != "nats" || !targets[plan.NATS] {
		return pickVictim(ctx, sess, children, targets, rng)
	}
	recs, err := plan.ReadRecords(children)
	if err != nil {
		return plan.Record{}, err
	}
	pool, err := plan.Victims(recs, map[plan.Kind]bool{plan.NATS: true})
	if err != nil {
		return plan.Record{}, err
	}
	off := cutOff(f, nodes)
	pool = slices.DeleteFunc(pool, func(r plan.Record) bool { return r.Name == off })
	if len(pool) == 0 {
		return plan.Record{}, plan.ErrNoVictim
	}
	return pool[rng.IntN(len(pool))], nil
}

// cutOff is the node of nodes that f cuts from the most others (the
// minority of a partition).
func cutOff(f nemesis.Fault, nodes []string) string {
	best, most := "", 0
	for _, n := range nodes {
		k := 0
		for e := range f.Cut {
			if e.From == n {
				k++
			}
		}
		if k > most {
			best, most = n, k
		}
	}
	return best
}

// storeLeader is the ID of the store's leader, "" when none answers.
func storeLeader(ctx context.Context, sess *client.Session) string {
	st, err := sess.Store.Client().Status(ctx, 300*time.Millisecond)
	if err != nil {
		return ""
	}
	for _, s := range st {
		if s.State == "Leader" {
			return s.ID
		}
	}
	return ""
}

// eventsLeader is the NATS server that leads the events stream, "" when
// none answers.
func eventsLeader(ctx context.Context, sess *client.Session) string {
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := sess.Bus.JetStream().Stream(ictx, bus.EventsStream)
	if err != nil {
		return ""
	}
	info, err := s.Info(ictx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// checkLinearizable checks the register history with porcupine and
// prints the verdict; an illegal history is written out as porcupine's
// visualization. It returns the number of violations.
func checkLinearizable(h *nemesis.History, seed uint64, out io.Writer) int {
	counts := h.Counts()
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	res, info := h.Check(2 * time.Minute)
	switch res {
	case porcupine.Ok:
		fmt.Fprintf(out, "  check: %d ConfigMap operations over HTTPS are linearizable (%s)\n", h.Len(), strings.Join(parts, ", "))
		return 0
	case porcupine.Unknown:
		fmt.Fprintf(out, "  VIOLATION: the linearizability check of %d operations did not finish in 2m (%s)\n", h.Len(), strings.Join(parts, ", "))
		return 1
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("podflow-chaos-%d-linearizability.html", seed))
	if err := porcupine.VisualizePath(nemesis.Model.ToModel(), info, path); err != nil {
		path = "(not written: " + err.Error() + ")"
	}
	if f, err := os.Create(strings.TrimSuffix(path, ".html") + ".jsonl"); err == nil {
		_ = h.WriteJSON(f)
		f.Close()
		path += " and the history in " + strings.TrimSuffix(path, ".html") + ".jsonl"
	}
	fmt.Fprintf(out, "  VIOLATION: the %d ConfigMap operations over HTTPS are not linearizable (%s); see %s\n", h.Len(), strings.Join(parts, ", "), path)
	return 1
}

// chaosWorkload publishes pods evenly over d, retrying publishes that fail
// while NATS or the stream is down.
func chaosWorkload(ctx context.Context, sess *client.Session, token, prefix string, n int, d time.Duration) (acked []string, err error) {
	template := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: "default", Labels: map[string]string{"app": "chaos"}},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{Name: "app", Image: "podflow/http:1",
			Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "100m", "memory": "64Mi"}}}}},
	}
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * d / time.Duration(n))); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return acked, ctx.Err()
			}
		}
		p := proto.CloneOf(template)
		p.Metadata.Name = fmt.Sprintf("%s%d", prefix, i)
		env := client.PodRequested(p, token)
		for attempt := 0; ; attempt++ {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := sess.Bus.Publish(pctx, env)
			cancel()
			if err == nil {
				acked = append(acked, p.Metadata.Name) // the stream acknowledged it
				break
			}
			if attempt == 60 || ctx.Err() != nil {
				return acked, fmt.Errorf("publish %s: %w", p.Metadata.Name, err)
			}
			sleepCtx(ctx, 500*time.Millisecond)
		}
	}
	return acked, nil
}

// pickVictim chooses a running process of the system under test among
// the records at children (what its `podflow up` runs now).
func pickVictim(ctx context.Context, sess *client.Session, children string, targets map[plan.Kind]bool, rng *rand.Rand) (plan.Record, error) {
	recs, err := plan.ReadRecords(children)
	if err != nil {
		return plan.Record{}, err
	}
	pool, err := plan.Victims(recs, targets)
	if err != nil {
		return plan.Record{}, err
	}
	// Half the store kills go to the leader: that is the interesting one.
	if targets[plan.Store] && rng.IntN(4) == 0 {
		if leader := storeLeader(ctx, sess); leader != "" {
			for _, k := range pool {
				if k.Name == leader {
					return k, nil
				}
			}
		}
	}
	return pool[rng.IntN(len(pool))], nil
}

// checkInvariants waits for the pods to settle, then checks what must
// hold after any amount of chaos. It prints each check and returns the
// number of violations.
func checkInvariants(ctx context.Context, sess *client.Session, prefix string, acked []string, settle time.Duration, out io.Writer) int {
	n := len(acked)
	violations := 0
	fail := func(format string, args ...any) {
		violations++
		fmt.Fprintf(out, "  VIOLATION: "+format+"\n", args...)
	}
	var pods []*corev1.Pod
	deadline := time.Now().Add(settle)
	for {
		all, _, err := objects.List[*corev1.Pod](ctx, sess.Store, "default")
		if err == nil {
			pods = pods[:0]
			ready := map[string]bool{}
			for _, p := range all {
				if strings.HasPrefix(p.GetMetadata().GetName(), prefix) {
					pods = append(pods, p)
					ready[p.GetMetadata().GetName()] = p.GetStatus().GetPhase() == "Running" && endpointsReady(p)
				}
			}
			// A pod the pipeline refused (PodRejected with a code) has
			// settled too: it is never stored, so never Running.
			var rejected map[string]int32
			if len(pods) < n {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				rejected, _ = rejectionCodes(rctx, sess.Bus.JetStream(), prefix)
				cancel()
			}
			running, refused, unsettled := settled(acked, ready, rejected)
			if len(unsettled) == 0 {
				fmt.Fprintf(out, "  check: every acknowledged pod settled: %d Running and Ready, %d rejected with a code\n", running, refused)
				break
			}
			if time.Now().After(deadline) {
				fail("%d of %d pods are Running and Ready and %d rejected after %s (%d stored); not settled: %s",
					running, n, refused, settle, len(pods), strings.Join(firstN(unsettled, 10), ", "))
				break
			}
		}
		select {
		case <-ctx.Done():
			return violations + 1
		case <-time.After(time.Second):
		}
	}
	fmt.Fprintf(out, "  check: %d/%d pods stored\n", len(pods), n)

	// No acknowledged PodRequested lost, none persisted twice, none
	// bound twice: from the stored pods and the PodRejected, PodPersisted
	// and PodScheduled events.
	o := podOutcomes{stored: map[string]storedPod{}, rejected: map[string]bool{}, persisted: map[string]map[string]bool{}, scheduled: map[string]map[string]bool{}}
	for _, p := range pods {
		o.stored[p.GetMetadata().GetName()] = storedPod{uid: p.GetMetadata().GetUid(), node: p.GetSpec().GetNodeName()}
	}
	counts := map[string]int{}
	for _, t := range []string{"PodRejected", "PodPersisted", "PodScheduled"} {
		evs, err := readEvents(ctx, sess.Bus.JetStream(), t, time.Minute)
		if err != nil {
			fail("read %s events: %v", t, err)
		}
		for _, e := range evs {
			if !strings.HasPrefix(e.GetPodName(), prefix) {
				continue
			}
			counts[t]++
			switch t {
			case "PodRejected":
				o.rejected[e.GetPodName()] = true
			case "PodPersisted":
				addTo(o.persisted, e.GetPodName(), e.GetPodUid())
			default:
				addTo(o.scheduled, e.GetPodUid(), e.GetNodeName())
			}
		}
	}
	for _, v := range checkRequested(acked, o) {
		fail("%s", v)
	}
	fmt.Fprintf(out, "  check: no acknowledged PodRequested lost, none persisted or bound twice (%d acknowledged, %d stored, %d rejected; %d PodPersisted, %d PodScheduled events)\n",
		n, len(o.stored), counts["PodRejected"], counts["PodPersisted"], counts["PodScheduled"])

	// No IP twice.
	ips := map[string]string{}
	for _, p := range pods {
		ip := p.GetStatus().GetPodIp()
		if ip == "" {
			continue
		}
		if other, dup := ips[ip]; dup {
			fail("pod IP %s given to %s and %s", ip, other, p.GetMetadata().GetName())
		}
		ips[ip] = p.GetMetadata().GetName()
	}
	fmt.Fprintf(out, "  check: no pod IP given twice (%d IPs)\n", len(ips))

	// No node overcommitted, and every node's accounting matches its pods.
	// A pod that Succeeded or Failed counts on no node, as in Kubernetes:
	// the status write that finished it released it (one written through
	// pods/status may stay accounted until the next bind to the node).
	all, _, _ := objects.List[*corev1.Pod](ctx, sess.Store, "")
	nodes, _, err := objects.List[*corev1.Node](ctx, sess.Store, "")
	if err != nil {
		fail("list nodes: %v", err)
	}
	allocs, _, _ := objects.List[*corev1.NodeAllocation](ctx, sess.Store, "")
	allocBy := map[string]*corev1.NodeAllocation{}
	for _, a := range allocs {
		allocBy[a.GetMetadata().GetName()] = a
	}
	for _, node := range nodes {
		name := node.GetMetadata().GetName()
		var used podrules.Resources
		uids, finished := map[string]bool{}, map[string]bool{}
		for _, p := range all {
			if p.GetSpec().GetNodeName() != name {
				continue
			}
			if ph := p.GetStatus().GetPhase(); ph == "Succeeded" || ph == "Failed" {
				finished[p.GetMetadata().GetUid()] = true
				continue
			}
			used.Pods++
			uids[p.GetMetadata().GetUid()] = true
			if req, err := podrules.PodRequests(p, podrules.PodResourcesOptions{}); err == nil {
				used.Add(req)
			}
		}
		allocatable := node.GetStatus().GetAllocatable()
		if alloc, err := podrules.ParseResourceList(allocatable); err == nil {
			if _, ok := allocatable[podrules.ResourceCPU]; ok && used.MilliCPU > alloc.MilliCPU {
				fail("node %s overcommitted: cpu %dm > %dm", name, used.MilliCPU, alloc.MilliCPU)
			}
			if _, ok := allocatable[podrules.ResourceMemory]; ok && used.Memory > alloc.Memory {
				fail("node %s overcommitted: memory %d > %d", name, used.Memory, alloc.Memory)
			}
			if _, ok := allocatable[podrules.ResourcePods]; ok && used.Pods > alloc.Pods {
				fail("node %s overcommitted: %d pods > %d", name, used.Pods, alloc.Pods)
			}
		}
		acc := allocBy[name].GetPods()
		for uid := range uids {
			if _, ok := acc[uid]; !ok {
				fail("node %s runs pod %s that its NodeAllocation does not account for", name, uid)
			}
		}
		for uid := range acc {
			if !uids[uid] && !finished[uid] {
				fail("node %s accounts for pod %s that is not bound to it", name, uid)
			}
		}
	}
	fmt.Fprintf(out, "  check: no node overcommitted; accounting matches the pods (%d nodes)\n", len(nodes))

	// The store replicas agree once quiet: revision, applied index and a
	// hash of their whole key space.
	agree := false
	var last string
	for i := 0; i < 20 && !agree; i++ {
		st, err := sess.Store.Client().StatusWithHash(ctx, time.Second)
		if err == nil {
			agree, last = replicasAgree(st, 3)
		}
		if !agree {
			sleepCtx(ctx, 500*time.Millisecond)
		}
	}
	if !agree {
		fail("the store replicas disagree: %s", last)
	}
	fmt.Fprintf(out, "  check: store replicas agree by content (%s)\n", last)

	// No event stuck in a durable consumer after the heal.
	consumers, stuck := awaitDrained(ctx, sess.Bus.JetStream(), 30*time.Second)
	for _, v := range stuck {
		fail("%s", v)
	}
	fmt.Fprintf(out, "  check: no event unacknowledged or undelivered in any durable consumer (%d consumers)\n", consumers)

	// Counts.
	if s, err := sess.Bus.JetStream().Stream(ctx, bus.EventsStream); err == nil {
		if info, err := s.Info(ctx); err == nil {
			fmt.Fprintf(out, "  events published: %d\n", info.State.Msgs)
		}
		var deliveries uint64
		for ci := range s.ListConsumers(ctx).Info() {
			deliveries += ci.Delivered.Consumer
		}
		fmt.Fprintf(out, "  deliveries to stages (redeliveries included): %d\n", deliveries)
	}
	if s, err := sess.Bus.JetStream().Stream(ctx, bus.DLQStream); err == nil {
		if info, err := s.Info(ctx); err == nil {
			fmt.Fprintf(out, "  dead-lettered: %d\n", info.State.Msgs)
		}
	}
	return violations
}

func endpointsReady(p *corev1.Pod) bool { return podrules.IsPodReady(p) }

func addTo(m map[string]map[string]bool, k, v string) {
	if m[k] == nil {
		m[k] = map[string]bool{}
	}
	m[k][v] = true
}

func restartWatches(ws []*watcher) {
	for _, w := range ws {
		w.Restart()
	}
}

// streamEvents reads every event of type t from the events stream.
// readEvents is streamEvents retried for up to limit: right after chaos
// the cluster may still be electing the stream's or the meta leader, and
// JetStream requests then time out. Only the read is retried; what it
// returns is checked once.
func readEvents(ctx context.Context, js jetstream.JetStream, t string, limit time.Duration) ([]*eventsv1.Envelope, error) {
	deadline := time.Now().Add(limit)
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		evs, err := streamEvents(rctx, js, t)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return evs, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func streamEvents(ctx context.Context, js jetstream.JetStream, t string) ([]*eventsv1.Envelope, error) {
	cons, err := js.OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.PodPrefix + "." + t + ".>"},
	})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []*eventsv1.Envelope
	for pending := int(info.NumPending); pending > 0; {
		batch, err := cons.Fetch(min(pending, 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return out, err
		}
		k := 0
		for m := range batch.Messages() {
			k++
			if env, err := bus.DecodeEnvelope(m.Data()); err == nil {
				out = append(out, env)
			}
		}
		if k == 0 {
			break
		}
		pending -= k
	}
	return out, nil
}

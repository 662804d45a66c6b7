package up

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/console"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/roles"
	"github.com/podflow/podflow/ops/processes/supervisor"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/sealed"
)

// up is one run of `podflow up`: its plan and what its steps share.
type up struct {
	o      *Options
	out    io.Writer
	plan   *plan.Plan
	layout plan.Layout
	unlock func()
	creds  bus.Credentials
	kube   *KubeFiles

	sup     *supervisor.Supervisor
	stopSup context.CancelFunc
	supDone chan struct{}
	// decommission, set on the Linux runtime, removes every trace of the
	// real node once its agent has stopped.
	decommission func()

	conn    *bus.Conn
	kv      *raftstore.Client
	store   *objects.Store
	cc      client.Config
	metrics map[string]string // process name → /metrics address
	console string            // the web console's address
	// consoleCode is the code of the one-time login link up prints.
	consoleCode string
}

func (u *up) logf(format string, args ...any) {
	if !u.o.Quiet {
		fmt.Fprintf(u.out, format+"\n", args...)
	}
}

// newUp takes the data directory, picks (or reads back) the addresses of
// the first start, creates the bus credentials of every role before any
// server starts (the servers of a cluster share them), the Kubernetes
// API's certificates, and builds the plan.
func newUp(o *Options, out io.Writer) (_ *up, err error) {
	replicas, err := parseReplicas(o.Replicas)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	u := &up{o: o, out: out, layout: plan.Layout{Dir: dir}}
	if u.unlock, err = lockDir(dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			u.unlock()
		}
	}()
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cl, err := loadOrPickCluster(u.layout.Cluster(), o.StoreReplicas, o.NATSPort, o.Cluster)
	if err != nil {
		return nil, err
	}
	if err := cl.checkFree(o.Cluster); err != nil {
		return nil, err
	}
	busRoles := pipeline.Roles()
	for _, id := range plan.NodeIdentities(o.Runtime, o.LinuxNodes) {
		busRoles = append(busRoles, id.Role)
	}
	if u.creds, err = bus.EnsureCredentials(u.layout.Credentials(), busRoles); err != nil {
		return nil, err
	}
	if u.kube, err = ensureKube(dir, o.HTTPSPort, o.ServiceCIDR); err != nil {
		return nil, fmt.Errorf("kubernetes API certificates: %w", err)
	}
	storeUser, _ := u.creds.User(pipeline.RoleStore)
	u.plan, err = plan.New(plan.Options{
		Exe: exe, DataDir: dir, NATSPort: cl.NATSPort, Cluster: o.Cluster,
		ClusterClientPorts: cl.ClusterClientPorts, ClusterRoutePorts: cl.ClusterRoutePorts,
		StoreAddrs: cl.StoreAddrs, StorePeerAddrs: cl.StorePeerAddrs,
		NATSRoutePeerAddrs: cl.NATSRoutePeerAddrs, NATSRouteAdvertise: cl.NATSRouteAdvertise, StoreUser: storeUser, Replicas: replicas, TLS: o.Cluster,
		Runtime: o.Runtime, Nodes: o.Nodes, LinuxNodes: o.LinuxNodes, NodeGrace: o.NodeGrace, APIArgs: u.kube.stageArgs(),
		ServiceCIDR: o.ServiceCIDR, PodSecurityDefault: o.PodSecurityDefault, HostPaths: o.HostPaths,
		ClusterCIDR: o.ClusterCIDR, NodeCIDRMaskSize: o.NodeCIDRMaskSize,
		StageArgs: map[string][]string{pipeline.RootCACert: {"--root-ca-file", u.kube.CACert}},
	})
	if err != nil {
		return u, err
	}
	// Every raft transport speaks mutual TLS, on loopback too, each store
	// replica with a raft certificate of its own.
	var replicaIDs []string
	for _, p := range u.plan.Step(plan.Store).Processes {
		replicaIDs = append(replicaIDs, p.Name)
	}
	if err := ensureRaftTLS(u.layout, u.kube.ca, replicaIDs); err != nil {
		return nil, fmt.Errorf("store certificates: %w", err)
	}
	// Secrets are encrypted at rest with the key written on first start.
	if _, err := raftstore.EnsureEncryptionConfig(u.layout.EncryptionConfig()); err != nil {
		return nil, fmt.Errorf("store encryption key: %w", err)
	}
	if !o.Cluster {
		return u, nil
	}
	// More than one server: every NATS listener speaks mutual TLS too
	// (docs/multi-machine.md does the same).
	if err := ensureClusterTLS(u.layout, u.kube.ca, u.creds); err != nil {
		return nil, fmt.Errorf("bus and store certificates: %w", err)
	}
	return u, nil
}

// startSupervisor runs the supervisor with the plan's restart policy,
// recording its children in children.json at every change and what
// happened to them in processes.log.
func (u *up) startSupervisor() error {
	cfg := u.plan.Supervisor
	var mu sync.Mutex
	journal := &plan.Journal{Path: u.layout.Processes()}
	cfg.OnEvent = func(e supervisor.Event) {
		mu.Lock()
		_ = plan.WriteRecords(u.layout.Children(), plan.Records(u.sup.List()))
		mu.Unlock()
		_ = journal.Append(plan.HappeningOf(e)) // the console's timeline marks; best effort
		switch e.Kind {
		case supervisor.EventExited:
			fmt.Fprintf(u.out, "up: %s (pid %d) exited with code %d; restarting (log: %s)\n", e.Name, e.PID, e.ExitCode, u.layout.Log(e.Name))
		case supervisor.EventStarted:
			if e.Restarts > 0 {
				fmt.Fprintf(u.out, "up: %s restarted (pid %d, restart %d)\n", e.Name, e.PID, e.Restarts)
			}
		}
	}
	sup, err := supervisor.New(cfg)
	if err != nil {
		return err
	}
	u.sup = sup
	ctx, stop := context.WithCancel(context.Background())
	u.stopSup, u.supDone = stop, make(chan struct{})
	go func() { defer close(u.supDone); _ = sup.Run(ctx) }()
	return nil
}

// shutdown stops the processes in the plan's stop order, so that stages
// drain while the bus and the store are still there; the processes of
// one kind stop at once (each drains on its own, and some twenty stages
// stopped one after another took half a minute on a busy machine).
func (u *up) shutdown() {
	for _, kind := range plan.StopOrder {
		var wg sync.WaitGroup
		for _, c := range plan.Records(u.sup.List()) {
			if c.Kind() == kind {
				wg.Go(func() { _ = u.sup.Stop(c.Name) })
			}
		}
		wg.Wait()
		if kind == plan.NodeAgent && u.decommission != nil {
			u.decommission()
		}
	}
	u.stopSup()
	<-u.supDone
}

// startStep starts the plan's processes of kind and waits for the
// readiness checks that gate the next step (a file, the store's leader),
// saying notReady when one fails; the consumers' checks wait for
// waitReady.
func (u *up) startStep(ctx context.Context, kind plan.Kind, notReady string) error {
	step := u.plan.Step(kind)
	for _, p := range step.Processes {
		if err := u.sup.Start(p.Spec(u.plan.Options.Exe)); err != nil {
			return err
		}
	}
	checked := map[plan.Check]bool{}
	for _, p := range step.Processes {
		c := p.Ready
		if checked[c] {
			continue
		}
		checked[c] = true
		switch c.Kind {
		case plan.CheckFile:
			if err := waitFile(ctx, c.Path, c.Timeout); err != nil {
				return fmt.Errorf("%s: %w", notReady, err)
			}
		case plan.CheckStore:
			if err := waitStore(ctx, u.kv, c.Timeout); err != nil {
				return fmt.Errorf("%s: %w", notReady, err)
			}
		}
	}
	return nil
}

// startBus starts NATS, writes every role's bus client file (each user of
// the bus has its own identity, given by `podflow config bus-user`),
// connects as admin and provisions the streams.
func (u *up) startBus(ctx context.Context) error {
	natsCfg := u.layout.NATSClientConfig()
	_ = os.Remove(natsCfg) // the single server writes it once listening
	if err := u.startStep(ctx, plan.NATS, fmt.Sprintf("the NATS server did not start (see %s)", u.layout.Log("nats"))); err != nil {
		return err
	}
	if u.plan.Options.Cluster {
		if err := bus.WriteClientConfigTLS(natsCfg, u.plan.NATSURLs(), u.creds.Admin(), u.busTLS(bus.RoleAdmin)); err != nil {
			return err
		}
	}
	bc, err := bus.ReadClientConfig(natsCfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(u.layout.RoleConfig(u.plan.NodeRole.Role)), 0o700); err != nil {
		return err
	}
	_ = os.Remove(u.layout.LegacyUserConfig()) // the shared client identity is gone
	for _, c := range u.creds.Users {
		if c.Role == bus.RoleAdmin || c.APIUser != "" { // users' files: podflow config bus-user
			continue
		}
		if err := bus.WriteClientConfigTLS(u.layout.RoleConfig(c.Role), bc.URLs, c, u.busTLS(c.Role)); err != nil {
			return err
		}
	}
	bc.Name = "podflow-up"
	if u.conn, err = bus.Connect(ctx, bc); err != nil {
		return err
	}
	if err := provisionRetry(ctx, u.conn, u.plan.Streams, 60*time.Second); err != nil {
		return fmt.Errorf("provision streams: %w", err)
	}
	u.logf("up: NATS JetStream at %s", strings.Join(bc.URLs, ","))
	return nil
}

// startStore starts the store replicas and waits for a leader.
func (u *up) startStore(ctx context.Context) error {
	kv, err := raftstore.NewClient(u.conn.NATS(), raftstore.DefaultClientConfig())
	if err != nil {
		return err
	}
	u.kv, u.store = kv, objects.New(kv)
	if err := u.startStep(ctx, plan.Store, fmt.Sprintf("the store did not elect a leader (see %s/store-*.log)", u.layout.Logs())); err != nil {
		return err
	}
	u.logf("up: store ready (%d replicas)", u.o.StoreReplicas)
	return nil
}

// bootstrap creates the admin's token and the client configuration every
// other command reads. The objects a fresh cluster has (system
// namespaces, bootstrap RBAC, default ServiceAccounts, kube-root-ca.crt)
// come from the stages' controllers, not from up.
func (u *up) bootstrap(ctx context.Context) error {
	token, err := adminToken(u.layout.Tokens())
	if err != nil {
		return err
	}
	key, err := sealed.LoadOrCreate(u.layout.SealKey())
	if err != nil {
		return fmt.Errorf("the api stage's seal key: %w", err)
	}
	u.cc = client.Config{NATS: u.layout.NATSClientConfig(), Token: token, DataDir: u.layout.Dir, SealKey: key.Public.String()}
	if err := client.WriteConfig(u.layout.ClientConfig(), u.cc); err != nil {
		return err
	}
	return writeProcessConfigs(u.layout, u.plan, u.cc.SealKey)
}

// writeProcessConfigs writes the client configuration of every process
// up runs as a role (plan.Layout.ProcessConfig): its own bus credentials
// and the api stage's public key, never the admin's token or bus
// credentials — those stay in the user's configuration.
func writeProcessConfigs(l plan.Layout, p *plan.Plan, sealKey string) error {
	var roles []string
	for _, id := range p.Nodes {
		roles = append(roles, id.Role.Role)
	}
	for _, s := range pipeline.Stages {
		roles = append(roles, pipeline.StageRole(s))
	}
	for _, role := range roles {
		path := l.ProcessConfig(role)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := client.WriteConfig(path, client.Config{NATS: l.RoleConfig(role), DataDir: l.Dir, SealKey: sealKey}); err != nil {
			return err
		}
	}
	return nil
}

// startNodes provisions the node agents' consumers as admin (a node
// identity may not), starts the registry and pushes podflow's images on
// the Linux runtime, then the node agents, and records every process's
// metrics address.
func (u *up) startNodes(ctx context.Context) error {
	for _, id := range u.plan.Nodes {
		if err := roles.ProvisionNodeAgent(ctx, u.conn, id.Runner); err != nil {
			return err
		}
	}
	if u.plan.Options.Runtime == plan.RuntimeLinux {
		registry, err := u.startRegistry(ctx)
		if err != nil {
			return err
		}
		u.logf("up: OCI registry at %s with podflow's images", registry)
		ids := u.plan.Nodes
		u.decommission = func() {
			// Each node's kernel objects are its own: decommission them at once.
			var wg sync.WaitGroup
			for _, id := range ids {
				args := append(u.plan.NodeAgentArgsOf(id, registry), "--decommission")
				wg.Go(func() { u.decommissionNode(id.Node, args) })
			}
			wg.Wait()
		}
	}
	if err := u.startStep(ctx, plan.NodeAgent, ""); err != nil {
		return err
	}
	u.metrics = u.plan.Metrics()
	return writeMetricsFile(u.layout.Metrics(), u.metrics)
}

// decommissionNode runs the Linux node's decommissioning (args) once its
// agent has exited, until it succeeds or two minutes pass: it succeeds
// only once the kernel holds nothing of the node (no pod namespace, veth,
// cgroup, bridge), so `up` never returns from a stop with those left.
func (u *up) decommissionNode(node string, args []string) {
	dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for try, wait := 1, 500*time.Millisecond; ; try, wait = try+1, min(2*wait, 10*time.Second) {
		b, err := exec.CommandContext(dctx, u.plan.Options.Exe, args...).CombinedOutput()
		if err == nil {
			return
		}
		if try == 1 {
			fmt.Fprintf(u.out, "up: decommission %s failed, retrying for up to 2m: %v\n%s", node, err, b)
		}
		select {
		case <-dctx.Done():
			fmt.Fprintf(u.out, "up: decommission %s: %v\n%s", node, err, b)
			return
		case <-time.After(wait):
		}
	}
}

// startRegistry runs `podflow registry` on loopback and pushes podflow's
// images into it (the seed's nginx is the HTTP server image), so that real
// pods run offline. It returns the registry's address.
func (u *up) startRegistry(ctx context.Context) (string, error) {
	_ = os.Remove(u.layout.RegistryAddr())
	if err := u.startStep(ctx, plan.Registry, "the registry did not start"); err != nil {
		return "", err
	}
	b, err := os.ReadFile(u.layout.RegistryAddr())
	if err != nil {
		return "", err
	}
	addr := strings.TrimSpace(string(b))
	exe := u.plan.Options.Exe
	// bin/busybox (make busybox) beside podflow, else the system's.
	busybox := "-"
	for _, b := range []string{filepath.Join(filepath.Dir(exe), "busybox"), "/bin/busybox"} {
		if _, err := os.Stat(b); err == nil {
			busybox = b
			break
		}
	}
	httpserver := filepath.Join(filepath.Dir(exe), "httpserver")
	if _, err := os.Stat(httpserver); err != nil {
		return "", fmt.Errorf("no %s to build the HTTP server image from: run `make httpserver` (make run does)", httpserver)
	}
	push := exec.CommandContext(ctx, exe, "images", "push", "--registry", addr, "--httpserver", httpserver, "--busybox", busybox)
	if b, err := push.CombinedOutput(); err != nil {
		return "", fmt.Errorf("push podflow's images: %v\n%s", err, b)
	}
	return addr, nil
}

// waitReady waits until every consumer of the plan has a replica pulling.
func (u *up) waitReady(ctx context.Context) error {
	if err := waitConsumers(ctx, u.conn, u.plan.Consumers(), 60*time.Second); err != nil {
		return err
	}
	if r := u.plan.Options.Replicas; r[pipeline.API] == 0 || r[pipeline.ServiceAccount] == 0 || r[pipeline.RootCACert] == 0 {
		return nil // asked for a system without them
	}
	return waitBootstrapped(ctx, u.store, 60*time.Second)
}

func (u *up) printRunning() {
	nodes := fmt.Sprintf("%d simulated nodes", u.o.Nodes)
	if u.plan.Options.Runtime == plan.RuntimeLinux {
		var names []string
		for _, id := range u.plan.Nodes {
			names = append(names, id.Node)
		}
		nodes = fmt.Sprintf("%d Linux node", len(names))
		if len(names) > 1 {
			nodes += "s"
		}
		nodes += " (" + strings.Join(names, ", ") + ")"
	}
	fmt.Fprintf(u.out, "up: podflow is running: %d stages, %d store replicas, %s\n", len(pipeline.Stages), u.o.StoreReplicas, nodes)
	fmt.Fprintf(u.out, "up: export PODFLOW_CONFIG=%s\n", u.layout.ClientConfig())
	fmt.Fprintf(u.out, "up: export KUBECONFIG=%s   # kubectl, https://%s\n", u.kube.Kubeconfig, u.kube.Addr)
	fmt.Fprintf(u.out, "up: metrics: http://%s/metrics (scheduler), every process's in %s\n", u.metrics["scheduler-1"], u.layout.Metrics())
	if u.console != "" {
		fmt.Fprintf(u.out, "up: console: http://%s/login?code=%s (a one-time login link; then http://%s/ with the admin token of %s)\n",
			u.console, u.consoleCode, u.console, u.layout.ClientConfig())
	}
	fmt.Fprintf(u.out, "up: logs in %s; Ctrl-C stops everything\n", u.layout.Logs())
}

// startConsole serves the web console (ops/console) on a free loopback
// port over up's own connection until ctx is done.
func (u *up) startConsole(ctx context.Context) error {
	// The address of the first start, kept in the data directory, so
	// that a bookmark or an open tab survives a restart; a free one
	// when it is taken.
	l, err := console.Listen("127.0.0.1:0")
	if b, rerr := os.ReadFile(u.layout.ConsoleAddr()); rerr == nil {
		if kept, kerr := console.Listen(strings.TrimSpace(string(b))); kerr == nil {
			l.Close()
			l, err = kept, nil
		} else if err == nil {
			fmt.Fprintf(u.out, "up: console: %s is taken (%v): on a new address\n", strings.TrimSpace(string(b)), kerr)
		}
	}
	if err != nil {
		return err
	}
	u.console = l.Addr().String()
	if err := os.WriteFile(u.layout.ConsoleAddr(), []byte(u.console+"\n"), 0o644); err != nil {
		l.Close()
		return err
	}
	links := console.NewLoginLinks(0)
	if u.consoleCode, err = links.New(u.cc.Token); err != nil {
		l.Close()
		return err
	}
	src := &console.BusSource{Sess: u.session(), MetricsFile: u.layout.Metrics(),
		Journals: []string{u.layout.Processes(), u.layout.Faults()}}
	go func() {
		if err := console.Serve(ctx, l, src, console.TokenFile(u.layout.Tokens()), links); err != nil {
			fmt.Fprintf(u.out, "up: console: %v\n", err)
		}
	}()
	return nil
}

// session is up's own connection as a client session (for --example).
func (u *up) session() *client.Session { return client.New(u.cc, u.conn, u.store) }

// serveScale serves `podflow scale` until ctx is done.
func (u *up) serveScale(ctx context.Context) error {
	ch := make(chan *nats.Msg, 8)
	sub, err := u.conn.NATS().ChanSubscribe(plan.ScaleSubject, ch)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(u.out, "up: stopping")
			return nil
		case m := <-ch:
			resp := u.scale(m.Data)
			_ = writeMetricsFile(u.layout.Metrics(), u.metrics)
			fmt.Fprintf(u.out, "up: scale: %s\n", resp.Message)
			b, _ := json.Marshal(resp)
			_ = m.Respond(b)
		}
	}
}

// scale starts or stops replicas of a stage so that it has the asked
// number (plan.Plan.Scale): new replicas join the stage's consumer and
// share its work; removed ones drain first (SIGTERM), so nothing in
// flight is lost.
func (u *up) scale(data []byte) plan.ScaleResponse {
	var req plan.ScaleRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return plan.ScaleResponse{Message: "bad request: " + err.Error()}
	}
	role := "stage/" + req.Stage
	var have []int
	for _, c := range u.sup.List() {
		if c.Spec.Role == role {
			have = append(have, plan.StageIndex(req.Stage, c.Spec.Name))
		}
	}
	start, stop, err := u.plan.Scale(req, have)
	if err != nil {
		return plan.ScaleResponse{Message: err.Error()}
	}
	for _, p := range start {
		if err := u.sup.Start(p.Spec(u.plan.Options.Exe)); err != nil {
			return plan.ScaleResponse{Message: err.Error()}
		}
		u.metrics[p.Name] = p.Metrics
	}
	for _, name := range stop {
		if err := u.sup.Stop(name); err != nil {
			return plan.ScaleResponse{Message: err.Error()}
		}
		delete(u.metrics, name)
	}
	var names []string
	for _, c := range u.sup.List() {
		if c.Spec.Role == role {
			names = append(names, c.Spec.Name)
		}
	}
	return plan.ScaleResponse{OK: true, Message: fmt.Sprintf("%s scaled to %d: %s", req.Stage, len(names), strings.Join(names, ", ")), Replicas: names}
}

// ClusterFile remembers the addresses chosen at first start, so that the
// store replicas find each other again after a restart.
type ClusterFile struct {
	StoreAddrs []string `json:"storeAddrs"`
	// StorePeerAddrs: where each replica dials its peers, when not at
	// StoreAddrs (written by `podflow chaos` before it starts the system:
	// the relays of its nemeses).
	StorePeerAddrs map[string]map[string]string `json:"storePeerAddrs,omitempty"`
	// NATSPort is the client port, fixed at first start so that a NATS
	// server restarted by the supervisor comes back where its clients look.
	NATSPort int `json:"natsPort"`
	// With --cluster: the client and route ports of the 3 NATS servers.
	ClusterClientPorts []int `json:"clusterClientPorts,omitempty"`
	ClusterRoutePorts  []int `json:"clusterRoutePorts,omitempty"`
	// NATSRoutePeerAddrs, NATSRouteAdvertise: where each NATS server
	// dials its peers' routes and the route address it advertises, when
	// not at ClusterRoutePorts (written by `podflow chaos`: its relays).
	NATSRoutePeerAddrs map[string]map[string]string `json:"natsRoutePeerAddrs,omitempty"`
	NATSRouteAdvertise string                       `json:"natsRouteAdvertise,omitempty"`
}

func writeMetricsFile(path string, m map[string]string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// provisionRetry provisions until JetStream answers: a cluster accepts
// streams only once it has elected a meta leader.
func provisionRetry(ctx context.Context, conn *bus.Conn, streams bus.StreamsConfig, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := roles.Provision(pctx, conn, streams)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// answered reports whether a process of consumer's stage (or node agent)
// answers the ping.
func answered(ctx context.Context, conn *bus.Conn, consumer string) bool {
	for _, p := range console.Ping(ctx, conn.NATS(), 200*time.Millisecond) {
		if p.Stage == consumer || (p.Stage == "nodeagent" && p.Replica == consumer) {
			return true
		}
	}
	return false
}

// waitConsumers waits until every named consumer of the events stream has
// a replica pulling from it: then the stage is ready to work.
func waitConsumers(ctx context.Context, conn *bus.Conn, names []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, name := range names {
		for {
			c, err := conn.JetStream().Consumer(ctx, bus.EventsStream, name)
			if err == nil {
				if info, err := c.Info(ctx); err == nil && info.NumWaiting > 0 {
					break
				}
				// A replica answering the ping is running its runner: with
				// replicated consumers a pending pull can be dropped by a
				// consumer leader change until the client pulls again.
				if answered(ctx, conn, name) {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("stage consumer %q has no replica pulling after %s: see the logs", name, timeout)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// parseReplicas reads "admission=2,scheduler=2"; every stage defaults to 1.
func parseReplicas(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, st := range pipeline.Stages {
		out[st] = 1
	}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		name, n, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || !pipeline.Known(name) {
			return nil, fmt.Errorf("--replicas: %q is not STAGE=N with a stage among %s", kv, strings.Join(pipeline.Stages, ", "))
		}
		v, err := strconv.Atoi(n)
		if err != nil || v < 0 || v > 64 {
			return nil, fmt.Errorf("--replicas: %q: N must be 0..64", kv)
		}
		out[name] = v
	}
	return out, nil
}

// lockDir takes an exclusive lock on dir, so that two `podflow up` never
// share a data directory.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "up.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another `podflow up` is running on %s", dir)
	}
	return func() { f.Close() }, nil
}

func waitFile(ctx context.Context, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not appear within %s", path, timeout)
}

// waitStore waits until the store answers a linearizable read.
func waitStore(ctx context.Context, kv *raftstore.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		_, err := kv.Get(ctx, "/registry/namespaces/default")
		if err == nil || errors.Is(err, raftstore.ErrNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// loadOrPickCluster reads the addresses of the first start from path, or
// picks them (and, for a NATS cluster, its client and route ports).
func loadOrPickCluster(path string, n, natsPort int, natsCluster bool) (ClusterFile, error) {
	c, err := loadOrPickStore(path, n, natsPort)
	if err != nil || !natsCluster || len(c.ClusterClientPorts) == 3 {
		return c, err
	}
	c.ClusterClientPorts, c.ClusterRoutePorts = nil, nil
	addrs, err := plan.FreeAddrs(6)
	if err != nil {
		return c, err
	}
	for _, a := range addrs {
		_, p, _ := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		if len(c.ClusterClientPorts) < 3 {
			c.ClusterClientPorts = append(c.ClusterClientPorts, port)
		} else {
			c.ClusterRoutePorts = append(c.ClusterRoutePorts, port)
		}
	}
	return c, WriteJSONFile(path, c)
}

func loadOrPickStore(path string, n, natsPort int) (ClusterFile, error) {
	var c ClusterFile
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &c); err != nil {
			return c, fmt.Errorf("%s: %w", path, err)
		}
		if len(c.StoreAddrs) != n {
			return c, fmt.Errorf("%s has %d store replicas, --store-replicas says %d: use another --data-dir", path, len(c.StoreAddrs), n)
		}
		if natsPort != 0 && c.NATSPort != natsPort {
			c.NATSPort = natsPort
		}
		if c.NATSPort != 0 {
			return c, WriteJSONFile(path, c)
		}
	}
	c.NATSPort = natsPort
	if c.NATSPort == 0 {
		a, err := plan.FreeAddr()
		if err != nil {
			return c, err
		}
		_, p, _ := net.SplitHostPort(a)
		c.NATSPort, _ = strconv.Atoi(p)
	}
	if len(c.StoreAddrs) == n {
		return c, WriteJSONFile(path, c)
	}
	addrs, err := plan.FreeAddrs(n + 1) // one more: not the NATS port
	if err != nil {
		return c, err
	}
	for _, a := range addrs {
		if _, p, _ := net.SplitHostPort(a); p != strconv.Itoa(c.NATSPort) && len(c.StoreAddrs) < n {
			c.StoreAddrs = append(c.StoreAddrs, a)
		}
	}
	return c, WriteJSONFile(path, c)
}

// WriteJSONFile writes v as indented JSON to path.
func WriteJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// adminToken returns the admin's token from the token file, creating the
// file with a random token at first start.
func adminToken(path string) (string, error) {
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		toks, err := auth.ParseTokenFile(f)
		if err != nil {
			return "", err
		}
		for _, t := range toks {
			if t.User.GetUsername() == "admin" {
				return t.Token, nil
			}
		}
		return "", fmt.Errorf("%s has no admin user", path)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b)
	line := fmt.Sprintf("%s,admin,admin,\"%s\"\n", tok, auth.GroupMasters)
	return tok, os.WriteFile(path, []byte(line), 0o600)
}

// ErrPortInUse is returned by `up` when a port it must listen on is taken.
var ErrPortInUse = errors.New("up: port in use")

// checkFree tells at once when a port the system listens on is taken
// (another `podflow up`, a NATS server), rather than letting the child
// fail and be restarted until the start-up gives up.
func (c ClusterFile) checkFree(cluster bool) error {
	type port struct{ what, addr string }
	var ports []port
	if cluster {
		for i, p := range c.ClusterClientPorts {
			ports = append(ports, port{fmt.Sprintf("NATS server %d's client port", i+1), fmt.Sprintf("127.0.0.1:%d", p)})
		}
		for i, p := range c.ClusterRoutePorts {
			ports = append(ports, port{fmt.Sprintf("NATS server %d's route port", i+1), fmt.Sprintf("127.0.0.1:%d", p)})
		}
	} else {
		ports = append(ports, port{"the NATS port", fmt.Sprintf("127.0.0.1:%d", c.NATSPort)})
	}
	for i, a := range c.StoreAddrs {
		ports = append(ports, port{fmt.Sprintf("store replica %d's raft port", i+1), a})
	}
	for _, p := range ports {
		l, err := net.Listen("tcp", p.addr)
		if err != nil {
			hint := "stop what listens there"
			if p.what == "the NATS port" {
				hint += ", or choose another with --nats-port (0: a free one)"
			}
			return fmt.Errorf("%w: %s %s is in use (another podflow up, or a NATS server?): %s", ErrPortInUse, p.what, p.addr, hint)
		}
		l.Close()
	}
	return nil
}

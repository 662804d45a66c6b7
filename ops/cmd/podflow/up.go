package main

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
	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/ops/supervisor"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

func init() { register(newUpCmd) }

type upOptions struct {
	dataDir       string
	natsPort      int
	storeReplicas int
	replicas      string
	runtime       string
	nodes         int
	example       bool
	exampleDir    string
	quiet         bool
	nodeGrace     time.Duration
	cluster       bool
	httpsPort     int        // Kubernetes API port (0: picked at first start)
	kube          *kubeFiles // set by runUp (up_kube.go)
}

func newUpCmd() *cobra.Command {
	o := &upOptions{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole system on this machine as supervised processes",
		Long: `Start embedded NATS JetStream, the replicated store, every lifecycle stage and
the node agents, each as its own child process, and supervise them: a child
that dies is restarted with backoff; Ctrl-C or SIGTERM stops them all
cleanly. The client configuration (bus credentials, admin token) is written to
DATA-DIR/config.json, where every other podflow command finds it.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUp(cmd.Context(), o, cmd.OutOrStdout()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", ".podflow", "data directory (bus, store, logs, client configuration)")
	f.IntVar(&o.natsPort, "nats-port", 4222, "NATS client port (0 picks a free one)")
	f.IntVar(&o.storeReplicas, "store-replicas", 3, "store replicas (an odd number)")
	f.StringVar(&o.replicas, "replicas", "", "replicas per stage, e.g. admission=2,scheduler=2 (default 1 each)")
	f.StringVar(&o.runtime, "runtime", "sim", "node runtime: sim (simulated nodes), linux (one real node on this machine: root, cgroups, netns), or auto (linux when possible, else sim)")
	f.IntVar(&o.nodes, "nodes", 3, "simulated nodes (with --runtime sim)")
	f.BoolVar(&o.example, "example", false, "apply the seed's example pod and Service and follow the pod to Ready")
	f.StringVar(&o.exampleDir, "example-dir", "examples", "directory of the example manifests")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print only the essentials")
	f.BoolVar(&o.cluster, "cluster", false, "run 3 NATS servers clustered over routes on loopback, with R3 streams")
	f.DurationVar(&o.nodeGrace, "node-monitor-grace-period", 40*time.Second, "mark a node NotReady after this long without heartbeats")
	f.IntVar(&o.httpsPort, "https-port", 0, "Kubernetes API (HTTPS) port on 127.0.0.1 (default: a free port picked at first start, then kept)")
	return cmd
}

// clusterFile remembers the addresses chosen at first start, so that the
// store replicas find each other again after a restart.
type clusterFile struct {
	StoreAddrs []string `json:"storeAddrs"`
	// NATSPort is the client port, fixed at first start so that a NATS
	// server restarted by the supervisor comes back where its clients look.
	NATSPort int `json:"natsPort"`
	// With --cluster: the client and route ports of the 3 NATS servers.
	ClusterClientPorts []int `json:"clusterClientPorts,omitempty"`
	ClusterRoutePorts  []int `json:"clusterRoutePorts,omitempty"`
}

func runUp(ctx context.Context, o *upOptions, out io.Writer) error {
	if o.storeReplicas < 1 || o.storeReplicas%2 == 0 {
		return fmt.Errorf("--store-replicas must be an odd number, got %d", o.storeReplicas)
	}
	switch o.runtime {
	case "sim", "linux":
	case "auto":
		o.runtime = "linux"
		if err := linux.Check(); err != nil {
			fmt.Fprintf(out, "up: the Linux runtime is not available here (%v): falling back to %d simulated nodes\n", err, o.nodes)
			o.runtime = "sim"
		}
	default:
		return fmt.Errorf("--runtime %q: want sim, linux or auto", o.runtime)
	}
	if o.runtime == "linux" {
		if err := linux.Check(); err != nil {
			return err
		}
	}
	replicas, err := parseReplicas(o.replicas)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) {
		if !o.quiet {
			fmt.Fprintf(out, format+"\n", args...)
		}
	}

	supCtx, stopSup := context.WithCancel(context.Background())
	cfg := supervisor.DefaultConfig()
	cfg.LogDir = filepath.Join(dir, "logs")
	var sup *supervisor.Supervisor
	var pidsMu sync.Mutex
	pidsFile := filepath.Join(dir, "children.json")
	cfg.OnEvent = func(e supervisor.Event) {
		pidsMu.Lock()
		writeChildren(pidsFile, sup.List())
		pidsMu.Unlock()
		switch e.Kind {
		case supervisor.EventExited:
			fmt.Fprintf(out, "up: %s (pid %d) exited with code %d; restarting (log: %s)\n", e.Name, e.PID, e.ExitCode, filepath.Join(cfg.LogDir, e.Name+".log"))
		case supervisor.EventStarted:
			if e.Restarts > 0 {
				fmt.Fprintf(out, "up: %s restarted (pid %d, restart %d)\n", e.Name, e.PID, e.Restarts)
			}
		}
	}
	sup, err = supervisor.New(cfg)
	if err != nil {
		stopSup()
		return err
	}
	supDone := make(chan struct{})
	go func() { defer close(supDone); _ = sup.Run(supCtx) }()
	var decommission func() // set when a real node must leave no trace
	shutdown := func() {
		// Stop in reverse dependency order so stages drain while the bus
		// and the store are still there.
		order := []string{"nodeagent", "stage", "store", "registry", "nats"}
		for _, role := range order {
			for _, c := range sup.List() {
				if strings.HasPrefix(c.Spec.Role, role) {
					_ = sup.Stop(c.Spec.Name)
				}
			}
			if role == "nodeagent" && decommission != nil {
				decommission()
			}
		}
		stopSup()
		<-supDone
	}
	defer shutdown()

	cl, err := loadOrPickCluster(filepath.Join(dir, "cluster.json"), o.storeReplicas, o.natsPort)
	if err != nil {
		return err
	}

	// 1. The bus. Every process gets its role's restricted NATS user
	// (services/pipeline.Roles); the credentials are created here, before
	// any server starts, so that the servers of a cluster share them.
	// The node agent's identity may act for its own nodes only.
	const linuxNode = "linux-node-1"
	nodeRC, nodeName := pipeline.SimNodesRunnerConfig("sim"), ""
	if o.runtime == "linux" {
		nodeRC, nodeName = pipeline.NodeAgentRunnerConfig(linuxNode), linuxNode
	}
	nodeRole := pipeline.NodeAgentRole(nodeRC, nodeName)
	creds, err := bus.EnsureCredentials(filepath.Join(dir, "nats", bus.CredsFileName), append(pipeline.Roles(), nodeRole))
	if err != nil {
		return err
	}
	natsCfg := filepath.Join(dir, "nats", "client.json")
	streams := bus.DefaultStreamsConfig()
	if o.cluster {
		streams.Replicas = 3
		if err := startNATSCluster(ctx, sup, exe, dir, &cl, natsCfg); err != nil {
			return err
		}
		if err := writeJSONFile(filepath.Join(dir, "cluster.json"), cl); err != nil {
			return err
		}
	} else {
		_ = os.Remove(natsCfg)
		if err := sup.Start(supervisor.Spec{Name: "nats", Role: "nats", Path: exe, Args: []string{
			"nats", "--data-dir", filepath.Join(dir, "nats"), "--port", strconv.Itoa(cl.NATSPort), "--client-config", natsCfg,
		}}); err != nil {
			return err
		}
		if err := waitFile(ctx, natsCfg, 20*time.Second); err != nil {
			return fmt.Errorf("the NATS server did not start (see %s): %w", filepath.Join(cfg.LogDir, "nats.log"), err)
		}
	}
	bc, err := bus.ReadClientConfig(natsCfg)
	if err != nil {
		return err
	}
	// Users of the bus get the locked-down client identity (user.json):
	// they may ask the api front door and publish PodRequested, nothing
	// else. podflow's own processes get their role's file.
	if err := os.MkdirAll(filepath.Dir(roleConfig(dir, nodeRole.Role)), 0o700); err != nil {
		return err
	}
	for _, u := range creds.Users {
		if u.Role == bus.RoleAdmin {
			continue
		}
		if err := bus.WriteClientConfig(roleConfig(dir, u.Role), bc.URLs, u); err != nil {
			return err
		}
	}
	bc.Name = "podflow-up"
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := provisionRetry(ctx, conn, streams, 60*time.Second); err != nil {
		return fmt.Errorf("provision streams: %w", err)
	}
	logf("up: NATS JetStream at %s", strings.Join(bc.URLs, ","))

	// 2. The store.
	var boot []string
	for i, a := range cl.StoreAddrs {
		boot = append(boot, fmt.Sprintf("store-%d=%s", i+1, a))
	}
	storeUser, _ := creds.User(pipeline.RoleStore)
	storeEnv := []string{"PODFLOW_NATS_URL=" + strings.Join(bc.URLs, ","), "PODFLOW_NATS_USER=" + storeUser.User, "PODFLOW_NATS_PASSWORD=" + storeUser.Password}
	for i, a := range cl.StoreAddrs {
		name := fmt.Sprintf("store-%d", i+1)
		if err := sup.Start(supervisor.Spec{Name: name, Role: "store", Path: exe, Env: storeEnv, Args: []string{
			"store", "run", "--id", name, "--data-dir", filepath.Join(dir, name), "--raft-addr", a, "--bootstrap", strings.Join(boot, ","),
		}}); err != nil {
			return err
		}
	}
	kv, err := raftstore.NewClient(conn.NATS(), raftstore.DefaultClientConfig())
	if err != nil {
		return err
	}
	st := objects.New(kv)
	if err := waitStore(ctx, kv, 60*time.Second); err != nil {
		return fmt.Errorf("the store did not elect a leader (see %s/store-*.log): %w", cfg.LogDir, err)
	}
	logf("up: store ready (%d replicas)", o.storeReplicas)

	// 3. Identity and bootstrap objects.
	token, err := adminToken(filepath.Join(dir, "tokens.csv"))
	if err != nil {
		return err
	}
	if err := seed(ctx, st); err != nil {
		return fmt.Errorf("seed the store: %w", err)
	}
	if o.kube, err = ensureKube(dir, o.httpsPort); err != nil {
		return fmt.Errorf("kubernetes API certificates: %w", err)
	}
	cc := clientConfig{NATS: natsCfg, Token: token, DataDir: dir}
	cfgPath := filepath.Join(dir, "config.json")
	if err := writeConfig(cfgPath, cc); err != nil {
		return err
	}

	// 4. The stages and the nodes, each serving /metrics.
	metrics := map[string]string{}
	for _, name := range pipeline.Stages {
		for i := 1; i <= replicas[name]; i++ {
			addr, err := startStage(sup, exe, cfgPath, dir, name, i, o)
			if err != nil {
				return err
			}
			metrics[fmt.Sprintf("%s-%d", name, i)] = addr
		}
	}
	naAddr, err := freeAddr()
	if err != nil {
		return err
	}
	consumers := []string{nodeRC.Consumer}
	nodeEnv := []string{natsConfigEnv + "=" + roleConfig(dir, nodeRole.Role)}
	if err := provisionNodeAgent(ctx, conn, nodeRC); err != nil {
		return err
	}
	nodesDesc := fmt.Sprintf("%d simulated nodes", o.nodes)
	if o.runtime == "linux" {
		node := linuxNode
		registry, err := startRegistry(ctx, sup, exe, dir)
		if err != nil {
			return err
		}
		logf("up: OCI registry at %s with podflow's images", registry)
		args := []string{"nodeagent", "--runtime", "linux", "--node", node, "--config", cfgPath,
			"--data-dir", filepath.Join(dir, "nodes", node), "--registry", registry}
		if err := sup.Start(supervisor.Spec{Name: "nodeagent-" + node, Role: "nodeagent", Path: exe, Env: nodeEnv,
			Args: append(args, "--metrics-addr", naAddr, "--provision=false")}); err != nil {
			return err
		}
		decommission = func() {
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(dctx, exe, append(args, "--decommission")...)
			if b, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(out, "up: decommission %s: %v\n%s", node, err, b)
			}
		}
		metrics["nodeagent-"+node] = naAddr
		nodesDesc = "1 Linux node (" + node + ")"
	} else {
		if err := sup.Start(supervisor.Spec{Name: "nodeagent-sim", Role: "nodeagent", Path: exe, Env: nodeEnv, Args: []string{
			"nodeagent", "--runtime", "sim", "--name", "sim", "--nodes", strconv.Itoa(o.nodes), "--config", cfgPath, "--metrics-addr", naAddr,
			"--provision=false",
		}}); err != nil {
			return err
		}
		metrics["nodeagent-sim"] = naAddr
	}
	if err := writeMetricsFile(filepath.Join(dir, "metrics.json"), metrics); err != nil {
		return err
	}
	for _, name := range pipeline.Stages {
		if replicas[name] > 0 {
			consumers = append(consumers, name)
		}
	}
	if err := waitConsumers(ctx, conn, consumers, 60*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(out, "up: podflow is running: %d stages, %d store replicas, %s\n", len(pipeline.Stages), o.storeReplicas, nodesDesc)
	fmt.Fprintf(out, "up: export PODFLOW_CONFIG=%s\n", cfgPath)
	fmt.Fprintf(out, "up: export KUBECONFIG=%s   # kubectl, https://%s\n", o.kube.Kubeconfig, o.kube.Addr)
	fmt.Fprintf(out, "up: metrics: http://%s/metrics (scheduler), every process's in %s\n", metrics["scheduler-1"], filepath.Join(dir, "metrics.json"))
	fmt.Fprintf(out, "up: logs in %s; Ctrl-C stops everything\n", cfg.LogDir)

	if o.example {
		sess := &session{cfg: cc, bus: conn, store: st}
		if err := runExample(ctx, sess, o.exampleDir, out); err != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "up: example: %v\n", err)
		}
	}
	// Serve `podflow scale` until stopped.
	scaleCh := make(chan *nats.Msg, 8)
	sub, err := conn.NATS().ChanSubscribe(ScaleSubject, scaleCh)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "up: stopping")
			return nil
		case m := <-scaleCh:
			resp := scale(sup, exe, cfgPath, dir, o, m.Data, metrics)
			_ = writeMetricsFile(filepath.Join(dir, "metrics.json"), metrics)
			fmt.Fprintf(out, "up: scale: %s\n", resp.Message)
			b, _ := json.Marshal(resp)
			_ = m.Respond(b)
		}
	}
}

// ScaleSubject is where `podflow up` takes `podflow scale` requests.
const ScaleSubject = "podflow.ops.up.scale"

type scaleRequest struct {
	Stage    string `json:"stage"`
	Replicas int    `json:"replicas"`
}

type scaleResponse struct {
	OK       bool     `json:"ok"`
	Message  string   `json:"message"`
	Replicas []string `json:"replicas"`
}

// scale starts or stops replicas of a stage so that it has the asked
// number: new replicas join the stage's consumer and share its work;
// removed ones drain first (SIGTERM), so nothing in flight is lost.
func scale(sup *supervisor.Supervisor, exe, cfgPath, dir string, o *upOptions, data []byte, metrics map[string]string) scaleResponse {
	var req scaleRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return scaleResponse{Message: "bad request: " + err.Error()}
	}
	if !pipeline.Known(req.Stage) || req.Replicas < 0 || req.Replicas > 64 {
		return scaleResponse{Message: fmt.Sprintf("cannot scale %q to %d: stages are %s, replicas 0..64", req.Stage, req.Replicas, strings.Join(pipeline.Stages, ", "))}
	}
	have := map[int]bool{}
	maxIdx := 0
	for _, c := range sup.List() {
		if c.Spec.Role == "stage/"+req.Stage {
			var i int
			fmt.Sscanf(strings.TrimPrefix(c.Spec.Name, req.Stage+"-"), "%d", &i)
			have[i] = true
			maxIdx = max(maxIdx, i)
		}
	}
	for i := 1; len(have) < req.Replicas; i++ {
		if have[i] {
			continue
		}
		addr, err := startStage(sup, exe, cfgPath, dir, req.Stage, i, o)
		if err != nil {
			return scaleResponse{Message: err.Error()}
		}
		metrics[fmt.Sprintf("%s-%d", req.Stage, i)] = addr
		have[i] = true
	}
	for i := maxIdx; len(have) > req.Replicas && i > 0; i-- {
		if !have[i] {
			continue
		}
		name := fmt.Sprintf("%s-%d", req.Stage, i)
		if err := sup.Stop(name); err != nil {
			return scaleResponse{Message: err.Error()}
		}
		delete(metrics, name)
		delete(have, i)
	}
	var names []string
	for _, c := range sup.List() {
		if c.Spec.Role == "stage/"+req.Stage {
			names = append(names, c.Spec.Name)
		}
	}
	return scaleResponse{OK: true, Message: fmt.Sprintf("%s scaled to %d: %s", req.Stage, len(names), strings.Join(names, ", ")), Replicas: names}
}

func startStage(sup *supervisor.Supervisor, exe, cfgPath, dir, name string, i int, o *upOptions) (metricsAddr string, err error) {
	replica := fmt.Sprintf("%s-%d", name, i)
	if metricsAddr, err = freeAddr(); err != nil {
		return "", err
	}
	args := []string{"stage", name, "--replica", replica, "--config", cfgPath, "--metrics-addr", metricsAddr}
	switch name {
	case pipeline.API:
		args = append(args, "--token-file", filepath.Join(dir, "tokens.csv"))
		if o.kube != nil {
			args = append(args, o.kube.stageArgs()...)
		}
	case pipeline.Status:
		args = append(args, "--node-monitor-grace-period", o.nodeGrace.String())
	}
	env := []string{natsConfigEnv + "=" + roleConfig(dir, pipeline.StageRole(name))}
	return metricsAddr, sup.Start(supervisor.Spec{Name: replica, Role: "stage/" + name, Path: exe, Env: env, Args: args})
}

// roleConfig is the bus client file of role's NATS user: user.json for
// the client identity users get, DATA/nats/roles/<role>.json for the
// processes `up` runs.
func roleConfig(dir, role string) string {
	if role == bus.RoleClient {
		return filepath.Join(dir, "nats", "user.json")
	}
	return filepath.Join(dir, "nats", "roles", role+".json")
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func writeMetricsFile(path string, m map[string]string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// startRegistry runs `podflow registry` on loopback and pushes podflow's
// images into it (the seed's nginx is the HTTP server image), so that real
// pods run offline. It returns the registry's address.
func startRegistry(ctx context.Context, sup *supervisor.Supervisor, exe, dir string) (string, error) {
	addrFile := filepath.Join(dir, "registry.addr")
	_ = os.Remove(addrFile)
	if err := sup.Start(supervisor.Spec{Name: "registry", Role: "registry", Path: exe, Args: []string{
		"registry", "--data-dir", filepath.Join(dir, "registry"), "--addr", "127.0.0.1:0", "--addr-file", addrFile,
	}}); err != nil {
		return "", err
	}
	if err := waitFile(ctx, addrFile, 20*time.Second); err != nil {
		return "", fmt.Errorf("the registry did not start: %w", err)
	}
	b, err := os.ReadFile(addrFile)
	if err != nil {
		return "", err
	}
	addr := strings.TrimSpace(string(b))
	busybox := "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		busybox = "-"
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

// startNATSCluster starts 3 NATS servers clustered over routes on loopback,
// sharing one credentials file, and writes a client configuration listing
// all three.
func startNATSCluster(ctx context.Context, sup *supervisor.Supervisor, exe, dir string, cl *clusterFile, natsCfg string) error {
	if len(cl.ClusterClientPorts) != 3 {
		cl.ClusterClientPorts, cl.ClusterRoutePorts = nil, nil
		for range 6 {
			a, err := freeAddr()
			if err != nil {
				return err
			}
			_, p, _ := net.SplitHostPort(a)
			n, _ := strconv.Atoi(p)
			if len(cl.ClusterClientPorts) < 3 {
				cl.ClusterClientPorts = append(cl.ClusterClientPorts, n)
			} else {
				cl.ClusterRoutePorts = append(cl.ClusterRoutePorts, n)
			}
		}
	}
	creds := filepath.Join(dir, "nats", "creds.json")
	if err := os.MkdirAll(filepath.Dir(creds), 0o700); err != nil {
		return err
	}
	var urls []string
	for i := range 3 {
		var routes []string
		for j, p := range cl.ClusterRoutePorts {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		name := fmt.Sprintf("nats-%d", i+1)
		if err := sup.Start(supervisor.Spec{Name: name, Role: "nats", Path: exe, Args: []string{
			"nats", "--data-dir", filepath.Join(dir, name), "--port", strconv.Itoa(cl.ClusterClientPorts[i]),
			"--server-name", name, "--cluster-name", "podflow", "--cluster-port", strconv.Itoa(cl.ClusterRoutePorts[i]),
			"--routes", strings.Join(routes, ","), "--creds", creds,
		}}); err != nil {
			return err
		}
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", cl.ClusterClientPorts[i]))
	}
	c, err := bus.LoadCredentials(creds)
	if err != nil {
		return err
	}
	return bus.WriteClientConfig(natsCfg, urls, c.Admin())
}

// provisionRetry provisions until JetStream answers: a cluster accepts
// streams only once it has elected a meta leader.
func provisionRetry(ctx context.Context, conn *bus.Conn, streams bus.StreamsConfig, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := provision(pctx, conn, streams)
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
	for _, p := range ping(ctx, conn.NATS(), 200*time.Millisecond) {
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

// childRecord is one line of DATA-DIR/children.json: what `podflow up`
// runs now, so that tests and chaos signal exactly the processes podflow
// started, by PID.
type childRecord struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	PID      int    `json:"pid"`
	Restarts int    `json:"restarts"`
}

func writeChildren(path string, kids []supervisor.Child) {
	recs := make([]childRecord, 0, len(kids))
	for _, k := range kids {
		recs = append(recs, childRecord{Name: k.Spec.Name, Role: k.Spec.Role, PID: k.PID, Restarts: k.Restarts})
	}
	b, _ := json.MarshalIndent(recs, "", "  ")
	tmp := path + ".tmp"
	if os.WriteFile(tmp, b, 0o644) == nil {
		_ = os.Rename(tmp, path)
	}
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

func loadOrPickCluster(path string, n, natsPort int) (clusterFile, error) {
	var c clusterFile
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
			return c, writeJSONFile(path, c)
		}
	}
	c.NATSPort = natsPort
	if c.NATSPort == 0 {
		a, err := freeAddr()
		if err != nil {
			return c, err
		}
		_, p, _ := net.SplitHostPort(a)
		c.NATSPort, _ = strconv.Atoi(p)
	}
	if len(c.StoreAddrs) == n {
		return c, writeJSONFile(path, c)
	}
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return c, err
		}
		c.StoreAddrs = append(c.StoreAddrs, l.Addr().String())
		defer l.Close()
	}
	return c, writeJSONFile(path, c)
}

func writeJSONFile(path string, v any) error {
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

// seed creates what a fresh cluster has: the default namespaces with their
// default ServiceAccount, and the bootstrap RBAC policy. Existing objects
// are left alone.
func seed(ctx context.Context, st *objects.Store) error {
	var objs []objects.Object
	now := nowTS()
	for _, ns := range []string{"default", "kube-system", "kube-public"} {
		objs = append(objs,
			&corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: ns, Uid: newUID(), CreationTimestamp: now,
				Labels: map[string]string{"kubernetes.io/metadata.name": ns}}, Status: &corev1.NamespaceStatus{Phase: "Active"}},
			&corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Name: "default", Namespace: ns, Uid: newUID(), CreationTimestamp: now}})
	}
	roles, bindings := auth.BootstrapPolicy()
	for _, r := range roles {
		objs = append(objs, r)
	}
	for _, b := range bindings {
		objs = append(objs, b)
	}
	for _, o := range objs {
		md := objects.Meta(o)
		if md.Uid == "" {
			md.Uid, md.CreationTimestamp = newUID(), now
		}
		if _, err := st.Create(ctx, o); err != nil && !errors.Is(err, raftstore.ErrAlreadyExists) {
			return err
		}
	}
	return nil
}

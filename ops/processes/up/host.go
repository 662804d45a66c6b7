package up

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/join"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/roles"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/sealed"
)

// HostFile is DATA/host.json: what a host of a cluster of several
// machines is, kept from its first start.
type HostFile struct {
	Name      string `json:"name"`
	Advertise string `json:"advertise"`
	Agent     bool   `json:"agent,omitempty"`
	// First: the host that ran up --init (it holds the CA key, serves the
	// joins and keeps the cluster's membership).
	First bool   `json:"first,omitempty"`
	Join  string `json:"join,omitempty"` // the join address it joined through
	// Routes are the other servers' NATS route addresses it knew when it
	// joined; ServerURLs the servers' NATS client URLs.
	Routes     []string `json:"routes,omitempty"`
	ServerURLs []string `json:"serverURLs"`
	// SeedRetired: the first server's seed NATS server is gone (a third
	// server joined); the streams are R3.
	SeedRetired bool `json:"seedRetired,omitempty"`
}

// HostRecord is one host of the cluster, in the store under
// HostPrefix (only the admin writes it; node agents read it for their
// host-gw routes).
type HostRecord struct {
	Name      string    `json:"name"`
	Advertise string    `json:"advertise"`
	Agent     bool      `json:"agent,omitempty"`
	NATSURL   string    `json:"natsURL,omitempty"`
	Route     string    `json:"route,omitempty"`
	Raft      string    `json:"raft,omitempty"`
	Joined    time.Time `json:"joined"`
	// Ready: the host's up finished starting (its NATS server, store
	// replica, stages and node agent run); the first server changes the
	// cluster's membership for ready servers only.
	Ready bool `json:"ready,omitempty"`
}

// HostPrefix holds the cluster's hosts (HostRecord), by name.
const HostPrefix = pipeline.HostPrefix

// clusterInfo is what a joiner gets besides its certificates
// (join.Bundle.Cluster).
type clusterInfo struct {
	Servers     []HostRecord       `json:"servers"`
	SealKey     string             `json:"sealKey"`
	ServiceCIDR string             `json:"serviceCIDR"`
	NodeUser    bus.UserCredential `json:"nodeUser"` // the joiner's node agent's bus user
}

// hostFile reads DATA/host.json (false: none yet).
func readHostFile(l plan.Layout) (HostFile, bool, error) {
	var h HostFile
	b, err := os.ReadFile(filepath.Join(l.Dir, "host.json"))
	if errors.Is(err, os.ErrNotExist) {
		return h, false, nil
	}
	if err != nil {
		return h, false, err
	}
	return h, true, json.Unmarshal(b, &h)
}

func writeHostFile(l plan.Layout, h HostFile) error {
	return WriteJSONFile(filepath.Join(l.Dir, "host.json"), h)
}

// validateHost checks the flags of a host of several machines.
func (o *Options) validateHost() error {
	switch {
	case o.Init && o.Join != "":
		return errors.New("--init starts a cluster and --join joins one: give one")
	case o.Join != "" && o.Token == "":
		return errors.New("--join needs --token (printed by the first server's up --init, or podflow token create)")
	case o.Agent && o.Init:
		return errors.New("--agent runs a node agent that joins a cluster: use it with --join")
	case o.Advertise == "":
		return errors.New("--advertise is required with --init and --join: the IP address the other hosts reach this one at")
	}
	if o.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--name: %w", err)
		}
		o.Name = strings.ToLower(h)
	}
	return nil
}

// runHost is `podflow up --init` or `--join`: this machine's share of a
// cluster of several.
func runHost(ctx context.Context, o *Options, out io.Writer) error {
	if err := o.validateHost(); err != nil {
		return err
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	u := &up{o: o, out: out, layout: plan.Layout{Dir: dir}}
	if u.unlock, err = lockDir(dir); err != nil {
		return err
	}
	defer u.unlock()
	h, found, err := readHostFile(u.layout)
	if err != nil {
		return err
	}
	switch {
	case found && (h.Name != o.Name && o.Name != "" || h.Advertise != o.Advertise):
		return fmt.Errorf("%s is host %s at %s: use another --data-dir for another host", dir, h.Name, h.Advertise)
	case !found && o.Init:
		if h, err = initFirst(u.layout, o); err != nil {
			return err
		}
	case !found:
		if h, err = joinCluster(ctx, u.layout, o, out); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var creds bus.Credentials
	if h.Agent {
		b, err := os.ReadFile(agentUserFile(u.layout))
		if err == nil {
			var nu bus.UserCredential
			err = json.Unmarshal(b, &nu)
			creds.Users = []bus.UserCredential{nu}
		}
		if err != nil {
			return fmt.Errorf("the node agent's bus user: %w", err)
		}
	} else if creds, err = bus.LoadCredentials(u.layout.Credentials()); err != nil {
		return err
	}
	storeUser, _ := creds.User(pipeline.RoleStore)
	ho := plan.HostOptions{Exe: exe, DataDir: dir, Name: h.Name, Advertise: h.Advertise, Agent: h.Agent, NATSPort: o.NATSPort,
		Routes: h.Routes, Seed: h.First && !h.SeedRetired, Bootstrap: h.First, ServerURLs: h.ServerURLs, StoreUser: storeUser,
		Runtime: o.Runtime, Nodes: o.Nodes, NodeGrace: o.NodeGrace, ServiceCIDR: o.ServiceCIDR,
		ClusterCIDR: o.ClusterCIDR, NodeCIDRMaskSize: o.NodeCIDRMaskSize}
	if ho.NATSPort == 4222 || ho.NATSPort == 0 {
		ho.NATSPort = plan.DefaultHostNATSPort
	}
	if h.First {
		// Also for a data directory made before the first server had them.
		if err := ensureFrontProxy(u.layout); err != nil {
			return err
		}
	}
	apiArgs := []string{"--https-addr", net.JoinHostPort(h.Advertise, strconv.Itoa(hostHTTPSPort(o))),
		"--tls-cert-file", u.layout.PKI("apiserver.crt"), "--tls-private-key-file", u.layout.PKI("apiserver.key"),
		"--client-ca-file", u.layout.PKI("ca.crt"), "--service-account-signing-key-file", u.layout.PKI("sa.key")}
	if _, err := os.Stat(u.layout.PKI(frontProxyClientCert)); err == nil {
		// The aggregator's, as the single-host up's (KubeFiles.stageArgs).
		apiArgs = append(apiArgs, "--proxy-client-cert-file", u.layout.PKI(frontProxyClientCert),
			"--proxy-client-key-file", u.layout.PKI(frontProxyClientKey),
			"--requestheader-client-ca-file", u.layout.PKI(frontProxyCACert), "--requestheader-allowed-names", FrontProxyClientName)
	}
	if u.plan, err = plan.NewHost(ho, apiArgs); err != nil {
		return err
	}
	if h.SeedRetired {
		u.plan.Streams.Replicas, u.plan.Streams.PlacementTags = 3, nil
	}
	sysPassword := randomHex(24)
	for i, s := range u.plan.Steps {
		if s.Kind == plan.NATS {
			for j := range s.Processes {
				u.plan.Steps[i].Processes[j].Env = append(u.plan.Steps[i].Processes[j].Env, roles.SystemPasswordEnv+"="+sysPassword)
			}
		}
	}
	if err := u.startSupervisor(); err != nil {
		return err
	}
	defer u.shutdown()
	hs := &hostRun{up: u, h: h, creds: creds, sysPassword: sysPassword, streamsR3: h.SeedRetired}
	return hs.run(ctx)
}

func hostHTTPSPort(o *Options) int {
	if o.HTTPSPort != 0 {
		return o.HTTPSPort
	}
	return plan.DefaultHostHTTPSPort
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// hostRun is one run of a host of several machines.
type hostRun struct {
	*up
	h           HostFile
	creds       bus.Credentials
	sysPassword string
	streamsR3   bool // the streams are R3 (the first server, once three servers run)
	// r3CatchingUp: the streams were made R3 and their new replicas are
	// catching up (said once).
	r3CatchingUp bool
}

func (r *hostRun) run(ctx context.Context) error {
	h, l := r.h, r.layout
	ownURL := []string{r.plan.Host.NATSURL()}
	urls := h.ServerURLs
	if !h.Agent {
		// The processes of a server reach the cluster through its own
		// NATS server first.
		urls = append(ownURL, without(h.ServerURLs, ownURL[0])...)
		if err := r.startStep(ctx, plan.NATS, ""); err != nil {
			return err
		}
	}
	// Every role's bus file; the node agent's user is known to its own
	// host's server (and, for an agent, to the first server's).
	if err := os.MkdirAll(filepath.Dir(l.RoleConfig(r.plan.NodeRole.Role)), 0o700); err != nil {
		return err
	}
	for _, c := range r.creds.Users {
		if err := bus.WriteClientConfigTLS(l.RoleConfig(c.Role), urls, c, l.BusTLS(c.Role)); err != nil {
			return err
		}
	}
	if nu, ok := r.creds.User(r.plan.NodeRole.Role); ok && !h.Agent {
		if err := bus.WriteClientConfigTLS(l.RoleConfig(nu.Role), ownURL, nu, l.BusTLS(nu.Role)); err != nil {
			return err
		}
	}
	var token string
	if !h.Agent {
		if err := bus.WriteClientConfigTLS(l.NATSClientConfig(), urls, r.creds.Admin(), l.BusTLS(bus.RoleAdmin)); err != nil {
			return err
		}
		var err error
		if token, err = adminToken(l.Tokens()); err != nil {
			return err
		}
	}
	var sealKey string
	if h.Agent {
		// An agent knows the api stage's public key only.
		sk, err := os.ReadFile(filepath.Join(l.Dir, "seal.pub"))
		if err != nil {
			return fmt.Errorf("the api stage's public seal key: %w", err)
		}
		sealKey = strings.TrimSpace(string(sk))
	} else {
		key, err := sealed.LoadOrCreate(l.SealKey())
		if err != nil {
			return err
		}
		sealKey = key.Public.String()
	}
	r.cc = client.Config{NATS: l.NATSClientConfig(), Token: token, DataDir: l.Dir, SealKey: sealKey}
	if !h.Agent {
		if err := client.WriteConfig(l.ClientConfig(), r.cc); err != nil {
			return err
		}
	}
	if err := writeProcessConfigs(l, r.plan, r.cc.SealKey); err != nil {
		return err
	}
	if h.Agent {
		// An agent holds no admin identity: the first server provisioned
		// its node agent's consumer when it joined.
		return r.runAgent(ctx)
	}
	bc, err := bus.ReadClientConfig(l.NATSClientConfig())
	if err != nil {
		return err
	}
	bc.Name = "podflow-up-" + h.Name
	if r.conn, err = bus.Connect(ctx, bc); err != nil {
		return err
	}
	defer r.conn.Close()
	if h.First {
		if err := provisionRetry(ctx, r.conn, r.plan.Streams, 120*time.Second); err != nil {
			return fmt.Errorf("provision streams: %w", err)
		}
	} else if err := waitJetStream(ctx, r.conn, 120*time.Second); err != nil {
		return err
	}
	r.logf("up: NATS JetStream at %s", strings.Join(urls, ","))
	if r.kv, err = raftstore.NewClient(r.conn.NATS(), raftstore.DefaultClientConfig()); err != nil {
		return err
	}
	r.store = objects.New(r.kv)
	if err := r.startStep(ctx, plan.Store, "the store did not answer (see "+l.Log("store")+")"); err != nil {
		return err
	}
	r.logf("up: store replica %s at %s", h.Name, r.plan.Host.RaftAddr())
	var tok join.Token
	if h.First {
		if err := r.record(ctx, HostRecord{Name: h.Name, Advertise: h.Advertise, NATSURL: ownURL[0], Route: r.plan.Host.RouteAddr(), Raft: r.plan.Host.RaftAddr(), Joined: time.Now()}); err != nil {
			return err
		}
		ca, err := pki.LoadCA(l.PKI("ca.crt"), l.PKI("ca.key"))
		if err != nil {
			return err
		}
		if tok, err = join.CreateToken(ctx, r.store, ca.CertPEM, r.o.TokenTTL, join.UsageServer); err != nil {
			return err
		}
		if err := r.serveJoins(ctx, ca); err != nil {
			return err
		}
		if err := r.serveNATSPeerRemovals(ctx); err != nil {
			return err
		}
	}
	if err := r.startStep(ctx, plan.StageKind, ""); err != nil {
		return err
	}
	if err := r.startNodes(ctx); err != nil {
		return err
	}
	if err := r.waitReady(ctx); err != nil {
		return err
	}
	if err := r.markReady(ctx); err != nil {
		return err
	}
	if h.First {
		go r.reconcileMembership(ctx)
	}
	fmt.Fprintf(r.out, "up: podflow is running: host %s (%s), server of a cluster of several\n", h.Name, h.Advertise)
	fmt.Fprintf(r.out, "up: export PODFLOW_CONFIG=%s\n", l.ClientConfig())
	if h.First {
		fmt.Fprintf(r.out, "up: export KUBECONFIG=%s   # kubectl, https://%s\n", filepath.Join(l.Dir, "kubeconfig"), net.JoinHostPort(h.Advertise, strconv.Itoa(hostHTTPSPort(r.o))))
		fmt.Fprintf(r.out, "up: join another server: podflow up --join %s --token %s --advertise IP\n", net.JoinHostPort(h.Advertise, strconv.Itoa(join.DefaultPort)), tok)
		fmt.Fprintf(r.out, "up: join a worker:       podflow up --join %s --token %s --advertise IP --agent\n", net.JoinHostPort(h.Advertise, strconv.Itoa(join.DefaultPort)), tok)
	}
	fmt.Fprintf(r.out, "up: logs in %s; Ctrl-C stops this host's processes\n", l.Logs())
	<-ctx.Done()
	fmt.Fprintln(r.out, "up: stopping")
	return nil
}

// runAgent runs an agent host's node agent (and registry) until ctx ends.
func (r *hostRun) runAgent(ctx context.Context) error {
	if r.plan.Options.Runtime == plan.RuntimeLinux {
		registry, err := r.startRegistry(ctx)
		if err != nil {
			return err
		}
		args := append(r.plan.NodeAgentArgs(registry), "--decommission")
		r.decommission = func() { r.decommissionNode(r.plan.Nodes[0].Node, args) }
	}
	if err := r.startStep(ctx, plan.NodeAgent, ""); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "up: podflow is running: host %s (%s), a node agent of the cluster at %s\n", r.h.Name, r.h.Advertise, r.h.Join)
	<-ctx.Done()
	fmt.Fprintln(r.out, "up: stopping")
	return nil
}

func without(s []string, x string) []string {
	var out []string
	for _, v := range s {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

// waitJetStream waits until JetStream answers (a joining server's NATS
// has found the cluster's meta leader).
func waitJetStream(ctx context.Context, conn *bus.Conn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		actx, c := context.WithTimeout(ctx, 3*time.Second)
		_, err := conn.JetStream().Stream(actx, bus.EventsStream)
		c()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("JetStream did not answer in %s: %w", timeout, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// record writes rec to the store (HostPrefix).
func (r *hostRun) record(ctx context.Context, rec HostRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	key := HostPrefix + rec.Name
	for {
		cur, err := r.kv.Get(ctx, key)
		switch {
		case errors.Is(err, raftstore.ErrNotFound):
			_, err = r.kv.Create(ctx, key, b)
		case err == nil:
			_, err = r.kv.Update(ctx, key, b, cur.ModRevision)
		}
		if errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrAlreadyExists) {
			continue
		}
		return err
	}
}

// markReady marks this host's record ready.
func (r *hostRun) markReady(ctx context.Context) error {
	hosts, err := r.hosts(ctx)
	if err != nil {
		return err
	}
	for _, h := range hosts {
		if h.Name == r.h.Name {
			h.Ready = true
			return r.record(ctx, h)
		}
	}
	return fmt.Errorf("the cluster has no record of host %s: join it again (another --data-dir)", r.h.Name)
}

// hosts lists the cluster's hosts.
func (r *hostRun) hosts(ctx context.Context) ([]HostRecord, error) {
	kvs, _, err := r.kv.List(ctx, HostPrefix)
	if err != nil {
		return nil, err
	}
	var out []HostRecord
	for _, kv := range kvs {
		var h HostRecord
		if err := json.Unmarshal(kv.Value, &h); err == nil {
			out = append(out, h)
		}
	}
	return out, nil
}

// initFirst prepares the first server's data directory: the cluster CA,
// this host's certificates, every role's bus credentials, the admin's
// token, kubeconfig and keys.
func initFirst(l plan.Layout, o *Options) (HostFile, error) {
	h := HostFile{Name: o.Name, Advertise: o.Advertise, First: true}
	ho := plan.HostOptions{Name: o.Name, Advertise: o.Advertise, NATSPort: o.NATSPort}
	if ho.NATSPort == 4222 || ho.NATSPort == 0 {
		ho.NATSPort = plan.DefaultHostNATSPort
	}
	h.ServerURLs = []string{ho.NATSURL()}
	if err := os.MkdirAll(l.PKI("bus"), 0o700); err != nil {
		return h, err
	}
	ca, err := pki.NewCA("podflow-ca")
	if err != nil {
		return h, err
	}
	if err := ca.WriteFiles(l.PKI("ca.crt"), l.PKI("ca.key")); err != nil {
		return h, err
	}
	_, nodeRole := plan.HostNodeRole(o.Name, o.Runtime)
	creds, err := bus.EnsureCredentials(l.Credentials(), append(pipeline.Roles(), nodeRole))
	if err != nil {
		return h, err
	}
	issue := func(kind, certFile, keyFile string) error {
		r, err := joinRequest(kind, o.Name, o.Advertise)
		if err != nil {
			return err
		}
		return issueOnce(ca, certFile, keyFile, r)
	}
	for _, kind := range hostKinds(o.Name, false, o.Runtime) {
		c, k := hostCertFiles(l, o.Name, kind)
		if err := issue(kind, c, k); err != nil {
			return h, err
		}
	}
	_ = creds
	if _, err := auth.LoadOrCreateSigningKey(l.PKI("sa.key")); err != nil {
		return h, err
	}
	if err := ensureFrontProxy(l); err != nil {
		return h, err
	}
	// Secrets are encrypted at rest with its key; every server gets it.
	if _, err := raftstore.EnsureEncryptionConfig(l.EncryptionConfig()); err != nil {
		return h, fmt.Errorf("store encryption key: %w", err)
	}
	if _, err := sealed.LoadOrCreate(l.SealKey()); err != nil {
		return h, err
	}
	if _, err := adminToken(l.Tokens()); err != nil {
		return h, err
	}
	// The admin's kubeconfig, for the first server's API.
	adminCert, adminKey := l.PKI("admin.crt"), l.PKI("admin.key")
	if err := issueOnce(ca, adminCert, adminKey, pki.Request{CommonName: "admin", Groups: []string{"system:masters"}}); err != nil {
		return h, err
	}
	cb, _ := os.ReadFile(adminCert)
	kb, _ := os.ReadFile(adminKey)
	kc := pki.Kubeconfig("https://"+net.JoinHostPort(o.Advertise, strconv.Itoa(hostHTTPSPort(o))), ca.CertPEM, cb, kb, "admin")
	if err := os.WriteFile(filepath.Join(l.Dir, "kubeconfig"), kc, 0o600); err != nil {
		return h, err
	}
	return h, writeHostFile(l, h)
}

// hostKinds are the certificates of a host: join.Kinds, and its
// simulated cluster's bus identity on the simulated runtime.
func hostKinds(name string, agent bool, runtime string) []string {
	kinds := join.Kinds(name, agent)
	if runtime == plan.RuntimeSim {
		kinds = append(kinds, join.SimulatedKind(name))
	}
	return kinds
}

// joinRequest is the certificate the first server issues itself for kind,
// as a join would.
func joinRequest(kind, name, advertise string) (pki.Request, error) {
	if role, ok := strings.CutPrefix(kind, "bus:"); ok {
		return join.CertRequest(join.KindBusClient, role, nil)
	}
	return join.CertRequest(kind, name, []string{advertise, name})
}

// hostCertFiles are where a host keeps its certificate of kind.
func hostCertFiles(l plan.Layout, name, kind string) (cert, key string) {
	switch kind {
	case join.KindNATSServer:
		f := l.NATSServerTLS()
		return f.CertFile, f.KeyFile
	case join.KindRaftPeer:
		f := l.RaftTLS(name)
		return f.CertFile, f.KeyFile
	case join.KindAPIServer:
		return l.PKI("apiserver.crt"), l.PKI("apiserver.key")
	}
	f := l.BusTLS(strings.TrimPrefix(kind, "bus:"))
	return f.CertFile, f.KeyFile
}

// joinCluster joins through the first server: keys made here,
// certificates for this host's names, the shared files of a server.
func joinCluster(ctx context.Context, l plan.Layout, o *Options, out io.Writer) (HostFile, error) {
	h := HostFile{Name: o.Name, Advertise: o.Advertise, Agent: o.Agent, Join: join.Addr(o.Join)}
	tok, err := join.ParseToken(o.Token)
	if err != nil {
		return h, err
	}
	kinds := hostKinds(o.Name, o.Agent, o.Runtime)
	csrs, keys, err := join.NewKeys(kinds)
	if err != nil {
		return h, err
	}
	resp, err := join.Join(ctx, o.Join, tok, join.Request{Name: o.Name, Advertise: o.Advertise, Agent: o.Agent,
		Simulated: o.Runtime == plan.RuntimeSim, CSRs: csrs})
	if err != nil {
		return h, err
	}
	if err := os.MkdirAll(l.PKI("bus"), 0o700); err != nil {
		return h, err
	}
	if err := os.WriteFile(l.PKI("ca.crt"), []byte(resp.CA), 0o644); err != nil {
		return h, err
	}
	for _, kind := range kinds {
		c, k := hostCertFiles(l, o.Name, kind)
		if err := os.WriteFile(k, []byte(keys[kind]), 0o600); err != nil {
			return h, err
		}
		if err := os.WriteFile(c, []byte(resp.Certs[kind]), 0o644); err != nil {
			return h, err
		}
	}
	for rel, b := range resp.Files {
		if filepath.IsAbs(rel) || strings.Contains(rel, "..") {
			return h, fmt.Errorf("the join answered a file outside the data directory: %q", rel)
		}
		p := filepath.Join(l.Dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return h, err
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return h, err
		}
	}
	var ci clusterInfo
	if err := json.Unmarshal(resp.Cluster, &ci); err != nil {
		return h, fmt.Errorf("the join's cluster information: %w", err)
	}
	joinHost, _, _ := net.SplitHostPort(h.Join)
	for _, s := range ci.Servers {
		if s.Name == o.Name {
			continue
		}
		h.Routes = append(h.Routes, s.Route)
		// An agent's node user is known to the server it joined through.
		if !o.Agent || s.Advertise == joinHost {
			h.ServerURLs = append(h.ServerURLs, s.NATSURL)
		}
	}
	if o.Agent {
		// Its only bus identity: its node's.
		b, err := json.Marshal(ci.NodeUser)
		if err != nil {
			return h, err
		}
		if err := os.MkdirAll(filepath.Dir(agentUserFile(l)), 0o700); err != nil {
			return h, err
		}
		if err := os.WriteFile(agentUserFile(l), b, 0o600); err != nil {
			return h, err
		}
		if err := os.WriteFile(filepath.Join(l.Dir, "seal.pub"), []byte(ci.SealKey+"\n"), 0o644); err != nil {
			return h, err
		}
	} else {
		ho := plan.HostOptions{Advertise: o.Advertise, NATSPort: o.NATSPort}
		if ho.NATSPort == 4222 || ho.NATSPort == 0 {
			ho.NATSPort = plan.DefaultHostNATSPort
		}
		h.ServerURLs = append([]string{ho.NATSURL()}, h.ServerURLs...)
	}
	fmt.Fprintf(out, "up: joined the cluster at %s as %s (%d certificates for %s and %s)\n", h.Join, o.Name, len(resp.Certs), o.Name, o.Advertise)
	return h, writeHostFile(l, h)
}

// agentUserFile is an agent host's only bus identity: its node's user.
func agentUserFile(l plan.Layout) string { return filepath.Join(l.Dir, "nats", "node-user.json") }

// serveJoins serves the join endpoint on the advertised address until
// ctx ends.
func (r *hostRun) serveJoins(ctx context.Context, ca *pki.CA) error {
	cert, err := tls.LoadX509KeyPair(r.layout.PKI("apiserver.crt"), r.layout.PKI("apiserver.key"))
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(r.h.Advertise, strconv.Itoa(join.DefaultPort))
	l, err := tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return fmt.Errorf("the join endpoint: %w", err)
	}
	logf, err := os.OpenFile(r.layout.Log("join"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		l.Close()
		return err
	}
	js := &join.Server{Config: join.Config{CA: ca, Tokens: r.store, Admit: r.admit, Log: slog.New(slog.NewTextHandler(logf, nil))}}
	srv := &http.Server{Handler: js.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		logf.Close()
	}()
	return nil
}

// admit records a joining host and hands it what its kind needs.
func (r *hostRun) admit(ctx context.Context, req *join.Request) (join.Bundle, error) {
	hosts, err := r.hosts(ctx)
	if err != nil {
		return join.Bundle{}, err
	}
	for _, h := range hosts {
		if h.Name == req.Name && h.Advertise != req.Advertise {
			return join.Bundle{}, &join.Error{Code: join.CodeConflict, Message: fmt.Sprintf("host %q is at %s already", h.Name, h.Advertise)}
		}
	}
	// Its node agent's bus user, on this server too (agents connect here).
	_, nodeRole := plan.HostNodeRole(req.Name, r.o.Runtime)
	creds, err := bus.EnsureCredentials(r.layout.Credentials(), append(pipeline.Roles(), nodeRole))
	if err != nil {
		return join.Bundle{}, err
	}
	nodeUser, _ := creds.User(nodeRole.Role)
	ho := plan.HostOptions{Advertise: req.Advertise}
	ho.NATSPort, ho.RoutePort, ho.RaftPort = plan.DefaultHostNATSPort, plan.DefaultHostRoutePort, plan.DefaultHostRaftPort
	rec := HostRecord{Name: req.Name, Advertise: req.Advertise, Agent: req.Agent, Joined: time.Now()}
	if !req.Agent {
		rec.NATSURL, rec.Route, rec.Raft = ho.NATSURL(), ho.RouteAddr(), ho.RaftAddr()
	}
	if err := r.record(ctx, rec); err != nil {
		return join.Bundle{}, err
	}
	if req.Agent {
		// Its consumer, provisioned by the admin (the node identity may not).
		rc, _ := plan.HostNodeRole(req.Name, r.o.Runtime)
		if err := roles.ProvisionNodeAgent(ctx, r.conn, rc); err != nil {
			return join.Bundle{}, err
		}
	}
	var servers []HostRecord
	for _, h := range append(hosts, rec) {
		if !h.Agent {
			servers = append(servers, h)
		}
	}
	ci := clusterInfo{Servers: servers, SealKey: r.cc.SealKey, ServiceCIDR: r.o.ServiceCIDR, NodeUser: nodeUser}
	cb, err := json.Marshal(ci)
	if err != nil {
		return join.Bundle{}, err
	}
	b := join.Bundle{Cluster: cb}
	if !req.Agent {
		// A server's share of the cluster's secrets: every role's bus
		// credentials, the tokens the api stage checks, the api stage's
		// sealing key, the ServiceAccount token signing key, the
		// store's encryption configuration and the aggregator's
		// front-proxy files.
		b.Files = map[string][]byte{}
		for rel, p := range map[string]string{
			"nats/creds.json": r.layout.Credentials(), "tokens.csv": r.layout.Tokens(),
			"api-seal.key": r.layout.SealKey(), "pki/sa.key": r.layout.PKI("sa.key"),
			"encryption-config.yaml": r.layout.EncryptionConfig(),
			// The aggregator's client certificate and the CA that
			// extension API servers check it against; the CA's key stays
			// on the first server.
			"pki/" + frontProxyCACert: r.layout.PKI(frontProxyCACert), "pki/" + frontProxyClientCert: r.layout.PKI(frontProxyClientCert),
			"pki/" + frontProxyClientKey: r.layout.PKI(frontProxyClientKey),
		} {
			data, err := os.ReadFile(p)
			if err != nil {
				return join.Bundle{}, err
			}
			b.Files[rel] = data
		}
	}
	fmt.Fprintf(r.out, "up: host %s (%s) joined as %s\n", req.Name, req.Advertise, map[bool]string{true: "a node agent", false: "a server"}[req.Agent])
	return b, nil
}

package bus

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultMaxPayload is the largest bus message by default: 8 MiB.
const DefaultMaxPayload = 8 << 20

// EmbeddedConfig configures an in-process nats-server with JetStream.
type EmbeddedConfig struct {
	// DataDir holds the JetStream store (DataDir/jetstream) and the
	// credentials file (DataDir/creds.json). Required.
	DataDir string
	// Host to listen on. Default "127.0.0.1".
	Host string
	// Port to listen on; 0 or -1 picks a free port.
	Port int
	// ServerName names the server in JetStream metadata. Default "podflow".
	ServerName string
	// SyncAlways fsyncs every JetStream write before the PubAck. Default
	// false: writes reach the OS page cache before the PubAck and are
	// fsynced every SyncInterval (see doc.go, Durability).
	SyncAlways bool
	// SyncInterval between fsyncs of JetStream files when SyncAlways is
	// false. Default 2 minutes (nats-server's default).
	SyncInterval time.Duration
	// MaxStore caps JetStream file storage in bytes; 0 = no limit beyond
	// the disk.
	MaxStore int64
	// StartTimeout bounds how long StartEmbedded waits for the server to
	// accept connections. Default 10s.
	StartTimeout time.Duration
	// Log sends the server's log to stderr. Default off.
	Log bool
	// CredsPath overrides where the credentials are kept (default
	// DataDir/creds.json). The servers of a cluster share one file, so
	// that every server knows every user.
	CredsPath string
	// Cluster joins the server to a NATS cluster over routes (JetStream
	// clustering: streams with Replicas 3 survive the loss of a server).
	// Empty ClusterName: a single server.
	ClusterName string
	// ClusterPort is the port the server takes routes on (on Host).
	ClusterPort int
	// Routes are the other servers' route URLs, e.g. "nats-route://127.0.0.1:6223".
	Routes []string
	// ClusterAdvertise is the route address this server tells the others
	// (nats-server's cluster advertise); they dial it when they learn of
	// this server by gossip, not through Routes. Default: Host and
	// ClusterPort, unless Host is unspecified (0.0.0.0, ::). Without an
	// advertised address, a server that accepts a route would gossip the
	// dialler's source address with its route port, an address the
	// dialler need not listen on: servers on several loopback addresses
	// dial out from 127.0.0.1, a machine with several addresses from the
	// one its routing table picks. A server that learnt such an address
	// dials it once and gives up, so the pair is never routed: no full
	// mesh, and the JetStream meta group loses their messages. `podflow
	// chaos` sets an address that refuses, so that every route runs
	// through the relay its Routes name.
	ClusterAdvertise string
	// Roles are NATS users to provision besides the built-in admin and
	// client, each restricted by its permissions (see RoleSpec).
	Roles []RoleSpec
	// TLS, when set, serves clients over TLS with this configuration (its
	// Certificates are the server's): with ClientAuth
	// tls.RequireAndVerifyClientCert and ClientCAs (nats-server's
	// TLSVerify) a client without a certificate from that CA is refused at
	// the handshake, before it can try a password. Nil: plain TCP, allowed
	// only on a loopback Host; any other Host requires TLS with client
	// verification.
	TLS *tls.Config
	// ClusterTLS, when set, runs routes over mutual TLS: it must present a
	// certificate valid for both serverAuth and clientAuth and verify the
	// peer's (RootCAs, ClientCAs, ClientAuth RequireAndVerifyClientCert),
	// and should require ServerGroup of it, so that a client's certificate
	// of the same CA cannot open a route. Required for a cluster on a
	// non-loopback Host.
	ClusterTLS *tls.Config
	// SystemPassword, when set, adds the user SystemUser to the system
	// account ($SYS), whose requests manage the cluster (a JetStream peer's
	// removal). Kept out of the credentials file: the process that starts
	// the server chooses it.
	SystemPassword string
	// Tags are the server's tags (nats-server's server_tags): a stream
	// with placement tags is placed on servers with every one of them.
	Tags []string
	// MaxPayload is the largest message the server takes, in bytes.
	// Default 8 MiB (DefaultMaxPayload). Every server of a cluster must
	// agree on it; store lists larger than a message are chunked.
	MaxPayload int32
	// ClientTLS is the client side that ClientConfig and ClientConfigAs
	// hand out for a server with TLS (in-process clients and tests).
	ClientTLS *tls.Config
}

// DefaultEmbeddedConfig returns the defaults for an embedded server
// storing its data under dataDir.
func DefaultEmbeddedConfig(dataDir string) EmbeddedConfig {
	return EmbeddedConfig{
		DataDir:      dataDir,
		Host:         "127.0.0.1",
		ServerName:   "podflow",
		SyncInterval: 2 * time.Minute,
		StartTimeout: 10 * time.Second,
	}
}

// Validate checks the configuration.
func (c EmbeddedConfig) Validate() error {
	switch {
	case c.DataDir == "":
		return invalidf("embedded: DataDir is required")
	case c.Port < -1 || c.Port > 65535:
		return invalidf("embedded: Port (%d) out of range", c.Port)
	case c.SyncInterval < 0:
		return invalidf("embedded: SyncInterval (%s) is negative", c.SyncInterval)
	case c.StartTimeout < 0:
		return invalidf("embedded: StartTimeout (%s) is negative", c.StartTimeout)
	case c.MaxStore < 0:
		return invalidf("embedded: MaxStore (%d) is negative", c.MaxStore)
	case c.ClusterName != "" && (c.ClusterPort <= 0 || c.ClusterPort > 65535):
		return invalidf("embedded: ClusterPort (%d) must be a port when ClusterName (%q) is set", c.ClusterPort, c.ClusterName)
	case c.ClusterName != "" && (c.ServerName == "" || c.ServerName == "podflow"):
		return invalidf("embedded: a clustered server needs its own ServerName")
	}
	if c.Host != "" && net.ParseIP(c.Host) == nil && c.Host != "localhost" {
		return invalidf("embedded: Host %q is not an IP address", c.Host)
	}
	loopback := c.Host == "" || c.Host == "localhost" || net.ParseIP(c.Host).IsLoopback()
	if err := checkMutualTLS("TLS", c.TLS, !loopback); err != nil {
		return err
	}
	if err := checkMutualTLS("ClusterTLS", c.ClusterTLS, !loopback && c.ClusterName != ""); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, r := range c.Roles {
		if err := r.validate(); err != nil {
			return fmt.Errorf("embedded: %w", err)
		}
		if seen[r.Role] {
			return invalidf("embedded: role %q declared twice", r.Role)
		}
		seen[r.Role] = true
	}
	return nil
}

func (c EmbeddedConfig) withDefaults() EmbeddedConfig {
	d := DefaultEmbeddedConfig(c.DataDir)
	if c.Host == "" {
		c.Host = d.Host
	}
	if c.ServerName == "" {
		c.ServerName = d.ServerName
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = d.SyncInterval
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = d.StartTimeout
	}
	if c.Port == 0 {
		c.Port = -1
	}
	if c.ClusterName != "" && c.ClusterAdvertise == "" {
		if ip := net.ParseIP(c.Host); ip == nil || !ip.IsUnspecified() {
			c.ClusterAdvertise = net.JoinHostPort(c.Host, strconv.Itoa(c.ClusterPort))
		}
	}
	return c
}

// ServerGroup is the group (certificate subject Organization) of a NATS
// server's certificate, which routes require of each other.
const ServerGroup = "podflow:nats-servers"

// checkMutualTLS refuses a TLS configuration that does not verify client
// certificates, and a missing one where required (a non-loopback host).
func checkMutualTLS(field string, cfg *tls.Config, required bool) error {
	switch {
	case cfg == nil && required:
		return invalidf("embedded: a non-loopback Host needs %s (mutual TLS)", field)
	case cfg == nil:
		return nil
	case len(cfg.Certificates) == 0 && cfg.GetCertificate == nil:
		return invalidf("embedded: %s has no certificate", field)
	case cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil:
		return invalidf("embedded: %s must require and verify client certificates (ClientAuth RequireAndVerifyClientCert, ClientCAs)", field)
	}
	return nil
}

// Role names a class of client in the credentials file.
const (
	// RoleAdmin may publish and subscribe to everything.
	RoleAdmin = "admin"
	// legacyRoleClient was the one NATS user every user of podflow
	// shared; each has its own now (UserRole). A credentials file that
	// still has it loses it at the next start.
	legacyRoleClient = "client"
)

// Credentials is the content of DataDir/creds.json: one entry per NATS
// user. Version 1 has an admin user; later versions add per-role users
// whose Permissions restrict the subjects they may use (NATS
// authorization users with publish/subscribe allow and deny lists).
type Credentials struct {
	Version int              `json:"version"`
	Users   []UserCredential `json:"users"`
}

// UserCredential is one NATS user.
type UserCredential struct {
	Role     string `json:"role"`
	User     string `json:"user"`
	Password string `json:"password"`
	// Permissions restrict the user; nil allows everything.
	Permissions *Permissions `json:"permissions,omitempty"`
	// APIUser, for a user of podflow (AddUser), is the API user the NATS
	// user is bound to; its permissions are UserPermissions(APIUser).
	APIUser string `json:"apiUser,omitempty"`
}

// Permissions are NATS subject permissions of a user.
type Permissions struct {
	Publish   *SubjectPermission `json:"publish,omitempty"`
	Subscribe *SubjectPermission `json:"subscribe,omitempty"`
	// AllowResponses lets the user reply to requests it received even
	// when Publish would not allow the reply subject.
	AllowResponses bool `json:"allow_responses,omitempty"`
}

// SubjectPermission lists allowed and denied subjects (wildcards ok).
type SubjectPermission struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// User returns the credential of the first user with role, if any.
func (c Credentials) User(role string) (UserCredential, bool) {
	for _, u := range c.Users {
		if u.Role == role {
			return u, true
		}
	}
	return UserCredential{}, false
}

// Admin returns the admin credential.
func (c Credentials) Admin() UserCredential {
	u, _ := c.User(RoleAdmin)
	return u
}

func (c Credentials) validate() error {
	if _, ok := c.User(RoleAdmin); !ok {
		return invalidf("credentials: no %q user", RoleAdmin)
	}
	seen := map[string]bool{}
	for _, u := range c.Users {
		if u.User == "" || u.Password == "" {
			return invalidf("credentials: user of role %q has an empty name or password", u.Role)
		}
		if seen[u.User] {
			return invalidf("credentials: duplicate user %q", u.User)
		}
		seen[u.User] = true
	}
	return nil
}

func (c Credentials) serverUsers() []*server.User {
	out := make([]*server.User, 0, len(c.Users))
	for _, u := range c.Users {
		su := &server.User{Username: u.User, Password: u.Password}
		if p := u.Permissions; p != nil {
			sp := &server.Permissions{}
			if p.Publish != nil {
				sp.Publish = &server.SubjectPermission{Allow: p.Publish.Allow, Deny: p.Publish.Deny}
			}
			if p.Subscribe != nil {
				sp.Subscribe = &server.SubjectPermission{Allow: p.Subscribe.Allow, Deny: p.Subscribe.Deny}
			}
			if p.AllowResponses {
				sp.Response = &server.ResponsePermission{MaxMsgs: 1}
			}
			su.Permissions = sp
		}
		out = append(out, su)
	}
	return out
}

// CredsFileName is the credentials file's name inside DataDir.
const CredsFileName = "creds.json"

// LoadCredentials reads a credentials file.
func LoadCredentials(path string) (Credentials, error) {
	var c Credentials
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("bus: read credentials %q: %w", path, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("bus: parse credentials %q: %w", path, err)
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("bus: credentials %q: %w", path, err)
	}
	return c, nil
}

// loadOrCreateCredentials returns the credentials in path, generating
// and writing (mode 0600) a password for every role that has none: admin
// and roles. The permissions of the built-in roles, of roles and of the
// users of podflow (AddUser) are set from the code on every call, so a
// newer policy applies to users created by an older one; users of
// undeclared roles are kept as they are, but the shared client user of
// older versions is removed.
func loadOrCreateCredentials(path string, roles []RoleSpec) (Credentials, error) {
	for _, r := range roles {
		if err := r.validate(); err != nil {
			return Credentials{}, fmt.Errorf("bus: credentials %q: %w", path, err)
		}
	}
	c, err := LoadCredentials(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return c, err
	}
	want := append([]RoleSpec{{Role: RoleAdmin}}, roles...)
	changed := false
	if i := slices.IndexFunc(c.Users, func(u UserCredential) bool { return u.Role == legacyRoleClient }); i >= 0 {
		c.Users, changed = slices.Delete(c.Users, i, i+1), true
	}
	for i, u := range c.Users {
		if u.APIUser == "" {
			continue
		}
		if p := UserPermissions(u.APIUser); u.Role != UserRole(u.APIUser) || !reflect.DeepEqual(u.Permissions, p) {
			c.Users[i].Role, c.Users[i].Permissions, changed = UserRole(u.APIUser), p, true
		}
	}
	for _, r := range want {
		i := slices.IndexFunc(c.Users, func(u UserCredential) bool { return u.Role == r.Role })
		if i < 0 {
			pw, err := randomSecret()
			if err != nil {
				return c, err
			}
			c.Users = append(c.Users, UserCredential{Role: r.Role, User: r.Role, Password: pw})
			i, changed = len(c.Users)-1, true
		}
		if !reflect.DeepEqual(c.Users[i].Permissions, r.Permissions) {
			c.Users[i].Permissions, changed = r.Permissions, true
		}
	}
	if c.Version < 3 {
		c.Version, changed = 3, true
	}
	if changed {
		if err := writeJSON0600(path, c); err != nil {
			return c, err
		}
	}
	return c, nil
}

func randomSecret() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("bus: generate secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// writeJSON0600 writes v atomically (temp file + rename) with mode 0600.
func writeJSON0600(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("bus: write %q: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("bus: write %q: %w", path, err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("bus: write %q: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("bus: write %q: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("bus: write %q: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("bus: write %q: %w", path, err)
	}
	return nil
}

// tlsTimeout bounds a TLS handshake on the client and route listeners, in
// seconds (nats-server's unit).
const tlsTimeout = 5

// SystemUser is the user of the system account (EmbeddedConfig.SystemPassword).
const SystemUser = "sys"

// JetStreamPeerID is the JetStream peer ID of the NATS server named name:
// nats-server's node name, eight base-62 digits of the name's SHA-256.
// $JS.API.SERVER.REMOVE takes it as peer_id; unlike the server's name, it
// needs no knowledge of the server on the meta leader's side (a leader
// that never heard from a server that is gone cannot find it by name,
// and answers that it is no member).
func JetStreamPeerID(name string) string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	sum := sha256.Sum256([]byte(name))
	id := make([]byte, 8)
	for i := range id {
		id[i] = digits[int(sum[i]%byte(len(digits)))]
	}
	return string(id)
}

// nobodyUser is who a client without credentials is on a server with a
// system user: allowed nothing.
const nobodyUser = "podflow-nobody"

func nobody() *server.User {
	deny := &server.SubjectPermission{Deny: []string{">"}}
	return &server.User{Username: nobodyUser, Password: randomPassword(), Permissions: &server.Permissions{Publish: deny, Subscribe: deny}}
}

func randomPassword() string {
	s, err := randomSecret()
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return s
}

// Embedded is a running in-process nats-server with JetStream.
type Embedded struct {
	srv  *server.Server
	cfg  EmbeddedConfig
	once sync.Once

	mu    sync.Mutex      // guards what a reload changes
	opts  *server.Options // as started or last reloaded
	creds Credentials
}

// StartEmbedded starts a nats-server with JetStream in this process and
// waits until it accepts connections (bounded by ctx and
// cfg.StartTimeout). The caller must call Shutdown.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("bus: data dir %q: %w", cfg.DataDir, err)
	}
	credsPath := cfg.CredsPath
	if credsPath == "" {
		credsPath = filepath.Join(cfg.DataDir, CredsFileName)
	}
	creds, err := loadOrCreateCredentials(credsPath, cfg.Roles)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName:         cfg.ServerName,
		Host:               cfg.Host,
		Port:               cfg.Port,
		JetStream:          true,
		StoreDir:           filepath.Join(cfg.DataDir, "jetstream"),
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  cfg.MaxStore,
		SyncAlways:         cfg.SyncAlways,
		SyncInterval:       cfg.SyncInterval,
		Users:              creds.serverUsers(),
		NoSigs:             true,
		NoLog:              !cfg.Log,
		MaxPayload:         cmp.Or(cfg.MaxPayload, DefaultMaxPayload),
		Tags:               cfg.Tags,
		// Almost every subject the server routes is seen once: an
		// event's names its pod, an ack its delivery, a reply its
		// request. The account's shared cache of match results misses
		// on each, takes its write lock to add an entry no later
		// message reads and sweeps itself when full; without it a
		// match walks the subscriptions under the read lock. Each
		// connection's own cache of its recent subjects stays.
		NoSublistCache: true,
	}
	if opts.JetStreamMaxStore == 0 {
		opts.JetStreamMaxStore = -1
	}
	if cfg.SystemPassword != "" {
		sys := server.NewAccount(server.DEFAULT_SYSTEM_ACCOUNT)
		opts.Accounts, opts.SystemAccount = []*server.Account{sys}, server.DEFAULT_SYSTEM_ACCOUNT
		opts.Users = append(opts.Users, &server.User{Username: SystemUser, Password: cfg.SystemPassword, Account: sys}, nobody())
		// With only the global and the system account, nats-server would
		// add a user without password and without limits to the global
		// account (its no_auth_user); one of ours, allowed nothing, takes
		// that place.
		opts.NoAuthUser = nobodyUser
	}
	if cfg.TLS != nil {
		opts.TLS, opts.TLSVerify, opts.TLSConfig, opts.TLSTimeout = true, true, cfg.TLS, tlsTimeout
	}
	if cfg.ClusterName != "" {
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: cfg.Host, Port: cfg.ClusterPort, Advertise: cfg.ClusterAdvertise}
		if cfg.ClusterTLS != nil {
			opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = cfg.ClusterTLS, tlsTimeout
		}
		opts.Routes = server.RoutesFromStr(strings.Join(cfg.Routes, ","))
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: embedded server: %w", err)
	}
	if cfg.Log {
		srv.ConfigureLogger()
	}
	srv.Start()
	e := &Embedded{srv: srv, creds: creds, cfg: cfg, opts: opts.Clone()}

	deadline := time.Now().Add(cfg.StartTimeout)
	for !srv.ReadyForConnections(100 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			e.Shutdown()
			return nil, fmt.Errorf("bus: embedded server start: %w", err)
		}
		if time.Now().After(deadline) {
			e.Shutdown()
			return nil, fmt.Errorf("bus: embedded server not ready after %s", cfg.StartTimeout)
		}
	}
	if !srv.JetStreamEnabled() {
		e.Shutdown()
		return nil, errors.New("bus: embedded server started without JetStream")
	}
	return e, nil
}

// ClientURL is the nats:// URL clients connect to.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Creds returns the server's credentials.
func (e *Embedded) Creds() Credentials {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.creds
}

// CredsFile is the path of the credentials file.
func (e *Embedded) CredsFile() string {
	if e.cfg.CredsPath != "" {
		return e.cfg.CredsPath
	}
	return filepath.Join(e.cfg.DataDir, CredsFileName)
}

// Server exposes the underlying nats-server (for tests and monitoring).
func (e *Embedded) Server() *server.Server { return e.srv }

// ClientConfig returns a client Config that connects to this server as
// the admin user, named name.
func (e *Embedded) ClientConfig(name string) Config {
	c, _ := e.ClientConfigAs(RoleAdmin, name)
	return c
}

// ClientConfigAs returns a client Config that connects to this server as
// the user of role, named name.
func (e *Embedded) ClientConfigAs(role, name string) (Config, error) {
	c := DefaultConfig()
	c.URLs = []string{e.ClientURL()}
	u, ok := e.Creds().User(role)
	if !ok {
		return c, invalidf("embedded: no user of role %q", role)
	}
	c.User, c.Password, c.Role = u.User, u.Password, role
	c.Name = name
	c.TLS = e.cfg.ClientTLS
	return c, nil
}

// EnsureCredentials creates or completes the credentials file at path for
// the built-in roles and roles, as a server started with them would (see
// EmbeddedConfig.Roles). The servers of a cluster share one file: create
// it before starting them, so that they agree on every password.
func EnsureCredentials(path string, roles []RoleSpec) (Credentials, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return Credentials{}, fmt.Errorf("bus: credentials dir: %w", err)
	}
	return loadOrCreateCredentials(path, roles)
}

// WriteClientConfig writes the URL and admin credentials of this server
// to path (mode 0600) for other processes; read it with
// ReadClientConfig.
func (e *Embedded) WriteClientConfig(path string) error {
	c := e.ClientConfig("")
	return writeJSON0600(path, clientFile{URLs: c.URLs, User: c.User, Password: c.Password})
}

// Shutdown stops the server and waits until it has stopped. It is
// idempotent and safe to call concurrently.
func (e *Embedded) Shutdown() {
	e.once.Do(func() {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	})
}

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/sealed"
)

// ConfigEnv names the client configuration when no path is given.
const ConfigEnv = "PODFLOW_CONFIG"

// NATSConfigEnv overrides the configuration's bus client file: `podflow
// up` runs each process with the file of its role's restricted NATS user.
const NATSConfigEnv = "PODFLOW_NATS_CONFIG"

// Config is what `podflow up` writes to DATA/config.json and every other
// command reads: how to reach the bus, and the admin's token.
type Config struct {
	// NATS is the bus client file written by `podflow nats` (URLs and
	// credentials).
	NATS string `json:"nats"`
	// Token is the admin bearer token (group system:masters).
	Token string `json:"token"`
	// DataDir is the data directory of the `podflow up` that wrote it.
	DataDir string `json:"dataDir"`
	// SealKey is the api stage's public key (hex, services/sealed): a
	// bearer token published on the bus is sealed to it (BusToken), so
	// the event stream never holds one in clear.
	SealKey string `json:"sealKey,omitempty"`
}

// Candidates are the files LoadConfig tries, in order, for path.
func Candidates(path string) []string {
	if path != "" {
		return []string{path}
	}
	var cands []string
	if p := os.Getenv(ConfigEnv); p != "" {
		cands = append(cands, p)
	}
	cands = append(cands, filepath.Join(".podflow", "config.json"))
	if home, err := os.UserHomeDir(); err == nil {
		cands = append(cands, filepath.Join(home, ".podflow", "config.json"))
	}
	return cands
}

// LoadConfig finds and reads the client configuration: path, or with
// path empty the first of Candidates that exists. A relative bus file is
// relative to the configuration's directory.
func LoadConfig(path string) (Config, error) {
	cands := Candidates(path)
	for _, p := range cands {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) && path == "" {
			continue
		}
		if err != nil {
			return Config{}, fmt.Errorf("read client config: %w", err)
		}
		var c Config
		if err := json.Unmarshal(b, &c); err != nil {
			return Config{}, fmt.Errorf("parse client config %q: %w", p, err)
		}
		if c.NATS != "" && !filepath.IsAbs(c.NATS) {
			c.NATS = filepath.Join(filepath.Dir(p), c.NATS)
		}
		if n := os.Getenv(NATSConfigEnv); n != "" {
			c.NATS = n
		}
		return c, nil
	}
	return Config{}, fmt.Errorf("no podflow client configuration found (is `podflow up` running? looked in %v)", cands)
}

// WriteConfig writes c to path atomically, readable by its owner only (it
// holds the admin token).
func WriteConfig(path string, c Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Session is a connected client: the bus and the store.
type Session struct {
	Config Config
	Bus    *bus.Conn
	Store  *objects.Store
	// RequestTimeout bounds each request of a command (CLI.RequestTimeout);
	// zero leaves each request's own default.
	RequestTimeout time.Duration
}

// RequestContext bounds ctx by the session's RequestTimeout, else by def,
// when ctx has no deadline yet (a default only when the caller set none).
func (s *Session) RequestContext(ctx context.Context, def time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	if s.RequestTimeout > 0 {
		def = s.RequestTimeout
	}
	return context.WithTimeout(ctx, def)
}

// Close closes the bus connection (and with it the store client).
func (s *Session) Close() { s.Bus.Close() }

// Token returns override, or the configuration's admin token without one.
func (s *Session) Token(override string) string {
	if override != "" {
		return override
	}
	return s.Config.Token
}

// BusToken returns token sealed to the configuration's SealKey, for a
// PodRequested published on the bus; token itself without a SealKey.
func (s *Session) BusToken(token string) (string, error) {
	return s.Config.BusToken(token)
}

// BusToken is Session.BusToken.
func (c Config) BusToken(token string) (string, error) {
	if c.SealKey == "" {
		return token, nil
	}
	pub, err := sealed.ParsePublicKey(c.SealKey)
	if err != nil {
		return "", err
	}
	return sealed.Seal(pub, token)
}

// Open loads the configuration at path (see LoadConfig) and connects.
func Open(ctx context.Context, path, name string) (*Session, error) {
	cfg, err := LoadConfig(path)
	if err != nil {
		return nil, err
	}
	return Connect(ctx, cfg, name)
}

// Connect dials the bus of cfg as name and opens a store client over it.
// It waits for the bus as long as ctx allows and reconnects forever: the
// behaviour of a long-lived process role. Commands use OpenCLI.
func Connect(ctx context.Context, cfg Config, name string) (*Session, error) {
	bc, err := bus.ReadClientConfig(cfg.NATS)
	if err != nil {
		return nil, err
	}
	bc.Name = name
	return connect(ctx, cfg, bc, StoreClientConfig(bc.User), 0)
}

func connect(ctx context.Context, cfg Config, bc bus.Config, sc raftstore.ClientConfig, requestTimeout time.Duration) (*Session, error) {
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return nil, fmt.Errorf("connect to the bus: %w", err)
	}
	kv, err := raftstore.NewClient(conn.NATS(), sc)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &Session{Config: cfg, Bus: conn, Store: objects.New(kv), RequestTimeout: requestTimeout}, nil
}

// ErrUnreachable is returned by OpenCLI when no server of the bus answered
// within CLI.ConnectTimeout.
var ErrUnreachable = errors.New("client: podflow unreachable")

// UnreachableError says which bus a command could not reach, and why.
type UnreachableError struct {
	// URL is the bus the configuration names (comma-separated servers).
	URL string
	// Err is the last connection error.
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach podflow at %s: is `podflow up` running?", e.URL)
}

// Unwrap returns ErrUnreachable and the cause.
func (e *UnreachableError) Unwrap() []error { return []error{ErrUnreachable, e.Err} }

// CLI is how a short-lived command connects: it gives up rather than
// wait for a bus that is not there.
type CLI struct {
	// ConnectTimeout bounds connecting, every attempt included. Default
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// MaxReconnects after a connection is lost mid-command (never -1:
	// a command does not wait forever). Default 2.
	MaxReconnects int
	// RequestTimeout bounds every request whose context has no deadline
	// (kubectl's --request-timeout); zero keeps each request's default.
	RequestTimeout time.Duration
}

// DefaultConnectTimeout is how long a command tries to reach the bus.
const DefaultConnectTimeout = 3 * time.Second

// DefaultRequestTimeout bounds a command's request, or publish, when
// neither its context nor --request-timeout does.
const DefaultRequestTimeout = 30 * time.Second

// DefaultCLI returns the defaults of a command's session.
func DefaultCLI() CLI {
	return CLI{ConnectTimeout: DefaultConnectTimeout, MaxReconnects: 2}
}

// Validate checks the options.
func (o CLI) Validate() error {
	switch {
	case o.ConnectTimeout <= 0:
		return fmt.Errorf("client: ConnectTimeout (%s) must be positive", o.ConnectTimeout)
	case o.MaxReconnects < 0:
		return fmt.Errorf("client: MaxReconnects (%d) must not be negative", o.MaxReconnects)
	case o.RequestTimeout < 0:
		return fmt.Errorf("client: RequestTimeout (%s) must not be negative", o.RequestTimeout)
	}
	return nil
}

// OpenCLI loads the configuration at path (see LoadConfig) and connects as
// a command: within o.ConnectTimeout or an *UnreachableError, no endless
// reconnecting, every request bounded by o.RequestTimeout.
func OpenCLI(ctx context.Context, path, name string, o CLI) (*Session, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		return nil, err
	}
	bc, err := bus.ReadClientConfig(cfg.NATS)
	if err != nil {
		return nil, err
	}
	bc.Name = name
	bc.MaxReconnects = o.MaxReconnects
	bc.ConnectTimeout = min(bc.ConnectTimeout, o.ConnectTimeout)
	bc.MaxReconnectWait = max(min(bc.MaxReconnectWait, o.ConnectTimeout/4), bc.ReconnectWait)
	sc := StoreClientConfig(bc.User)
	// A publish waits as long as a request does: long enough to ride out
	// a stream electing a new leader (bus.Conn.Publish retries).
	bc.PublishTimeout = DefaultRequestTimeout
	if o.RequestTimeout > 0 {
		sc.Timeout = o.RequestTimeout
		sc.AttemptTimeout = min(sc.AttemptTimeout, o.RequestTimeout)
		bc.PublishTimeout = o.RequestTimeout
		bc.PublishAttemptTimeout = min(bc.PublishAttemptTimeout, o.RequestTimeout)
	}
	cctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	sess, err := connect(cctx, cfg, bc, sc, o.RequestTimeout)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		return nil, &UnreachableError{URL: strings.Join(bc.URLs, ","), Err: err}
	}
	return sess, err
}

// ParseRequestTimeout reads a --request-timeout value as kubectl does: a
// duration ("1s", "2m"), or a bare integer of seconds; "0" is no limit of
// the command's own (each request keeps its default).
func ParseRequestTimeout(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("invalid timeout value %q: must not be negative", s)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid timeout value %q: must be a single integer in seconds, or an integer followed by a corresponding time unit (e.g. 1s | 2m | 3h)", s)
	}
	return d, nil
}

// New wraps a connection made elsewhere (`podflow up`'s own) as a Session.
func New(cfg Config, conn *bus.Conn, st *objects.Store) *Session {
	return &Session{Config: cfg, Bus: conn, Store: st}
}

// StoreClientConfig is the store client configuration of a bus user: a
// process of a role reads and writes as itself (pipeline.StoreReadACL,
// StoreWriteACL); the admin's requests are unnamed.
func StoreClientConfig(busUser string) raftstore.ClientConfig {
	sc := raftstore.DefaultClientConfig()
	if busUser != bus.RoleAdmin {
		sc.User = busUser
	}
	return sc
}

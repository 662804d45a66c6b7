package client

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

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
func Connect(ctx context.Context, cfg Config, name string) (*Session, error) {
	bc, err := bus.ReadClientConfig(cfg.NATS)
	if err != nil {
		return nil, err
	}
	bc.Name = name
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return nil, fmt.Errorf("connect to the bus: %w", err)
	}
	kv, err := raftstore.NewClient(conn.NATS(), StoreClientConfig(bc.User))
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &Session{Config: cfg, Bus: conn, Store: objects.New(kv)}, nil
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

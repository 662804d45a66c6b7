package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// clientConfig is what `podflow up` writes to DATA/config.json and every
// other command reads: how to reach the bus, and the admin's token.
type clientConfig struct {
	// NATS is the bus client file written by `podflow nats` (URLs and
	// credentials).
	NATS string `json:"nats"`
	// Token is the admin bearer token (group system:masters).
	Token string `json:"token"`
	// DataDir is the data directory of the `podflow up` that wrote it.
	DataDir string `json:"dataDir"`
}

const configEnv = "PODFLOW_CONFIG"

// natsConfigEnv overrides the config's bus client file: `podflow up` runs
// each process with the file of its role's restricted NATS user.
const natsConfigEnv = "PODFLOW_NATS_CONFIG"

// configFlag adds --config to cmd.
func configFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVar(path, "config", "", "client configuration written by `podflow up` (default $PODFLOW_CONFIG, ./.podflow/config.json, ~/.podflow/config.json)")
}

// loadConfig finds and reads the client configuration.
func loadConfig(path string) (clientConfig, error) {
	var cands []string
	if path != "" {
		cands = []string{path}
	} else {
		if p := os.Getenv(configEnv); p != "" {
			cands = append(cands, p)
		}
		cands = append(cands, filepath.Join(".podflow", "config.json"))
		if home, err := os.UserHomeDir(); err == nil {
			cands = append(cands, filepath.Join(home, ".podflow", "config.json"))
		}
	}
	for _, p := range cands {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) && path == "" {
			continue
		}
		if err != nil {
			return clientConfig{}, fmt.Errorf("read client config: %w", err)
		}
		var c clientConfig
		if err := json.Unmarshal(b, &c); err != nil {
			return clientConfig{}, fmt.Errorf("parse client config %q: %w", p, err)
		}
		if c.NATS != "" && !filepath.IsAbs(c.NATS) {
			c.NATS = filepath.Join(filepath.Dir(p), c.NATS)
		}
		if n := os.Getenv(natsConfigEnv); n != "" {
			c.NATS = n
		}
		return c, nil
	}
	return clientConfig{}, fmt.Errorf("no podflow client configuration found (is `podflow up` running? looked in %v)", cands)
}

func writeConfig(path string, c clientConfig) error {
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

// session is a connected client: the bus and the store.
type session struct {
	cfg   clientConfig
	bus   *bus.Conn
	store *objects.Store
}

func (s *session) Close() { s.bus.Close() }

// connect dials the bus and opens a store client over it.
func connect(ctx context.Context, cfg clientConfig, name string) (*session, error) {
	bc, err := bus.ReadClientConfig(cfg.NATS)
	if err != nil {
		return nil, err
	}
	bc.Name = name
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return nil, fmt.Errorf("connect to the bus: %w", err)
	}
	sc := raftstore.DefaultClientConfig()
	if bc.User != bus.RoleAdmin {
		// A process of a role reads and writes as itself
		// (pipeline.StoreReadACL, StoreWriteACL).
		sc.User = bc.User
	}
	kv, err := raftstore.NewClient(conn.NATS(), sc)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &session{cfg: cfg, bus: conn, store: objects.New(kv)}, nil
}

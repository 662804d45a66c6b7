package bus

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config configures a client connection.
type Config struct {
	// URLs of the NATS servers (embedded or a cluster). Required.
	URLs []string
	// User and Password authenticate the client. Alternatively CredsFile
	// names a credentials file (creds.json of an embedded server) and
	// Role selects its user (default RoleAdmin).
	User      string
	Password  string
	CredsFile string
	Role      string
	// Name is the client name shown by the server, e.g. "scheduler-1".
	Name string
	// ConnectTimeout bounds one dial attempt. Default 5s.
	ConnectTimeout time.Duration
	// ReconnectWait is the first pause between connection attempts,
	// initial and after a disconnect; it doubles on every failed attempt
	// up to MaxReconnectWait, with up to 20% jitter. Default 250ms.
	ReconnectWait time.Duration
	// MaxReconnectWait caps the pause. Default 5s.
	MaxReconnectWait time.Duration
	// MaxReconnects before the connection gives up; -1 (default) retries
	// forever.
	MaxReconnects int
	// ReconnectBufSize buffers publishes while disconnected. Default 8MiB.
	ReconnectBufSize int
	// PublishTimeout bounds a Publish whose ctx has no deadline. Default 10s.
	PublishTimeout time.Duration
	// PublishAttemptTimeout bounds one attempt of a Publish: an attempt
	// no stream answered in that time is sent again (Publish). Default 3s.
	PublishAttemptTimeout time.Duration
	// AsyncMaxPending bounds PublishAsync messages awaiting a PubAck.
	// Default 4096.
	AsyncMaxPending int
	// DrainTimeout bounds Close's flush of pending messages. Default 10s.
	DrainTimeout time.Duration
	// TLS, when set, dials the servers over TLS with this configuration:
	// RootCAs verifies the server, Certificates is this client's
	// certificate for a server that requires one (EmbeddedConfig.TLS).
	// TLSFiles does the same from PEM files; set one or the other.
	TLS      *tls.Config
	TLSFiles TLSFiles
}

// TLSFiles names the PEM files of a TLS client: the CA that signs the
// servers' certificates and this client's certificate and key. Empty
// CAFile: no TLS.
type TLSFiles struct {
	CAFile   string `json:"ca,omitempty"`
	CertFile string `json:"cert,omitempty"`
	KeyFile  string `json:"key,omitempty"`
}

// DefaultConfig returns the defaults; URLs and credentials are left empty.
func DefaultConfig() Config {
	return Config{
		Role:                  RoleAdmin,
		ConnectTimeout:        5 * time.Second,
		ReconnectWait:         250 * time.Millisecond,
		MaxReconnectWait:      5 * time.Second,
		MaxReconnects:         -1,
		ReconnectBufSize:      8 << 20,
		PublishTimeout:        10 * time.Second,
		PublishAttemptTimeout: 3 * time.Second,
		AsyncMaxPending:       4096,
		DrainTimeout:          10 * time.Second,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case len(c.URLs) == 0:
		return invalidf("config: URLs is empty")
	case c.CredsFile != "" && (c.User != "" || c.Password != ""):
		return invalidf("config: set either CredsFile or User/Password, not both")
	case c.ConnectTimeout <= 0:
		return invalidf("config: ConnectTimeout (%s) must be positive", c.ConnectTimeout)
	case c.ReconnectWait <= 0:
		return invalidf("config: ReconnectWait (%s) must be positive", c.ReconnectWait)
	case c.MaxReconnectWait < c.ReconnectWait:
		return invalidf("config: MaxReconnectWait (%s) cannot be less than ReconnectWait (%s)", c.MaxReconnectWait, c.ReconnectWait)
	case c.MaxReconnects < -1:
		return invalidf("config: MaxReconnects (%d) must be -1 or more", c.MaxReconnects)
	case c.PublishTimeout <= 0:
		return invalidf("config: PublishTimeout (%s) must be positive", c.PublishTimeout)
	case c.PublishAttemptTimeout <= 0:
		return invalidf("config: PublishAttemptTimeout (%s) must be positive", c.PublishAttemptTimeout)
	case c.AsyncMaxPending <= 0:
		return invalidf("config: AsyncMaxPending (%d) must be positive", c.AsyncMaxPending)
	case c.DrainTimeout <= 0:
		return invalidf("config: DrainTimeout (%s) must be positive", c.DrainTimeout)
	case c.TLS != nil && c.TLSFiles != (TLSFiles{}):
		return invalidf("config: set either TLS or TLSFiles, not both")
	case (c.TLSFiles.CertFile == "") != (c.TLSFiles.KeyFile == ""):
		return invalidf("config: TLSFiles needs both CertFile and KeyFile or neither")
	case c.TLSFiles.CertFile != "" && c.TLSFiles.CAFile == "":
		return invalidf("config: TLSFiles with a certificate needs CAFile")
	}
	for _, u := range c.URLs {
		if strings.TrimSpace(u) == "" {
			return invalidf("config: empty URL")
		}
	}
	return nil
}

// backoff is the pause before reconnection attempt n (1-based):
// ReconnectWait doubled n-1 times, capped at MaxReconnectWait, minus up
// to 20% jitter so that clients restarted together spread out.
func (c Config) backoff(n int) time.Duration {
	d := c.ReconnectWait
	for i := 1; i < n && d < c.MaxReconnectWait; i++ {
		d *= 2
	}
	d = min(d, c.MaxReconnectWait)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// clientFile is the on-disk client configuration written by
// (*Embedded).WriteClientConfig.
type clientFile struct {
	URLs     []string  `json:"urls"`
	User     string    `json:"user,omitempty"`
	Password string    `json:"password,omitempty"`
	TLS      *TLSFiles `json:"tls,omitempty"`
}

// ReadClientConfig reads a file written by (*Embedded).WriteClientConfig
// into DefaultConfig().
func ReadClientConfig(path string) (Config, error) {
	c := DefaultConfig()
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("bus: read client config %q: %w", path, err)
	}
	var f clientFile
	if err := json.Unmarshal(b, &f); err != nil {
		return c, fmt.Errorf("bus: parse client config %q: %w", path, err)
	}
	c.URLs, c.User, c.Password = f.URLs, f.User, f.Password
	if f.TLS != nil {
		c.TLSFiles = *f.TLS
	}
	return c, c.Validate()
}

// Conn is a NATS connection with its JetStream context. It is safe for
// concurrent use.
type Conn struct {
	once sync.Once
	nc   *nats.Conn
	js   jetstream.JetStream
	cfg  Config
	name string
}

// Connect dials the servers in cfg. It retries a failed first connection
// every cfg.ReconnectWait until ctx is done; once connected, the client
// reconnects on its own (forever by default). The caller must Close it.
func Connect(ctx context.Context, cfg Config) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	user, pass := cfg.User, cfg.Password
	if cfg.CredsFile != "" {
		creds, err := LoadCredentials(cfg.CredsFile)
		if err != nil {
			return nil, err
		}
		role := cfg.Role
		if role == "" {
			role = RoleAdmin
		}
		u, ok := creds.User(role)
		if !ok {
			return nil, invalidf("config: credentials %q have no user of role %q", cfg.CredsFile, role)
		}
		user, pass = u.User, u.Password
	}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.Timeout(cfg.ConnectTimeout),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return cfg.backoff(attempts) }),
		nats.MaxReconnects(cfg.MaxReconnects),
		nats.ReconnectBufSize(cfg.ReconnectBufSize),
		nats.DrainTimeout(cfg.DrainTimeout),
		// Errors surface through the calls that hit them; keep nats.go
		// from printing asynchronous ones to stderr.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS))
	}
	if f := cfg.TLSFiles; f.CAFile != "" {
		opts = append(opts, nats.RootCAs(f.CAFile))
		if f.CertFile != "" {
			opts = append(opts, nats.ClientCert(f.CertFile, f.KeyFile))
		}
	}
	if user != "" {
		// Replies come to this user's own inboxes (see InboxPrefix).
		opts = append(opts, nats.UserInfo(user, pass), nats.CustomInboxPrefix(InboxPrefix(user)))
	}
	url := strings.Join(cfg.URLs, ",")
	var (
		nc  *nats.Conn
		err error
	)
	for attempt := 1; ; attempt++ {
		nc, err = nats.Connect(url, opts...)
		if err == nil {
			break
		}
		t := time.NewTimer(cfg.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("bus: connect to %q: %w (last error: %v)", url, ctx.Err(), err)
		case <-t.C:
		}
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.AsyncMaxPending))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	return &Conn{nc: nc, js: js, cfg: cfg, name: cfg.Name}, nil
}

// NATS returns the underlying connection.
func (c *Conn) NATS() *nats.Conn { return c.nc }

// JetStream returns the JetStream context of the connection.
func (c *Conn) JetStream() jetstream.JetStream { return c.js }

// Name is the client name.
func (c *Conn) Name() string { return c.name }

// Close drains the connection — pending publishes and acks are flushed,
// subscriptions finish their buffered messages — within cfg.DrainTimeout,
// then closes it. It is idempotent.
func (c *Conn) Close() { c.once.Do(c.close) }

func (c *Conn) close() {
	if c.nc.IsClosed() {
		return
	}
	closed := make(chan struct{})
	c.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := c.nc.Drain(); err != nil {
		c.nc.Close()
		return
	}
	select {
	case <-closed:
	case <-time.After(c.cfg.DrainTimeout + time.Second):
		c.nc.Close()
	}
}

// WriteClientConfig writes a client configuration file (read it with
// ReadClientConfig) for the servers at urls and the user u, mode 0600.
// `podflow up --cluster` writes one listing every server of the cluster.
func WriteClientConfig(path string, urls []string, u UserCredential) error {
	return WriteClientConfigTLS(path, urls, u, TLSFiles{})
}

// WriteClientConfigTLS is WriteClientConfig for servers that speak TLS:
// the file also names the CA and the client's certificate and key.
func WriteClientConfigTLS(path string, urls []string, u UserCredential, files TLSFiles) error {
	f := clientFile{URLs: urls, User: u.User, Password: u.Password}
	if files != (TLSFiles{}) {
		f.TLS = &files
	}
	return writeJSON0600(path, f)
}

// Package authtrust keeps kube-system/extension-apiserver-authentication,
// the ConfigMap in which the api server tells extension API servers whom
// to trust, as kube-apiserver's cluster authentication trust controller
// (pkg/controlplane/controller/clusterauthenticationtrust):
//
//   - client-ca-file: the CAs of the client certificates the api server
//     accepts;
//   - requestheader-client-ca-file, requestheader-allowed-names,
//     requestheader-username-headers, requestheader-group-headers,
//     requestheader-extra-headers-prefix: the front-proxy CA, the common
//     names of the client certificates the aggregator proxies with, and
//     the headers it names the user in (JSON string arrays).
//
// What the ConfigMap holds already is kept: this api server's CAs and
// strings are added to it (the CAs deduplicated, expired ones dropped),
// so api servers with different CAs share it, as kube's.
//
// It runs in the api process, passing once at Start (retried until it
// succeeds) and every Interval; every write is a create-if-absent or a
// compare-and-swap, so any number of api replicas may run it.
//
// Usage:
//
//	c, err := authtrust.New(env, authtrust.Config{ClientCA: ca, RequestHeaderCA: fp, ...})
//	h := stage.Compose(apiStage, c)
package authtrust

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// The ConfigMap's namespace and name, and its keys, as kube-apiserver's.
const (
	Namespace = "kube-system"
	Name      = "extension-apiserver-authentication"

	KeyClientCA            = "client-ca-file"
	KeyRequestHeaderCA     = "requestheader-client-ca-file"
	KeyAllowedNames        = "requestheader-allowed-names"
	KeyUsernameHeaders     = "requestheader-username-headers"
	KeyGroupHeaders        = "requestheader-group-headers"
	KeyExtraHeadersPrefix  = "requestheader-extra-headers-prefix"
	DefaultUsernameHeader  = "X-Remote-User"
	DefaultGroupHeader     = "X-Remote-Group"
	DefaultExtraHeadersPfx = "X-Remote-Extra-"
)

// Config configures a Controller.
type Config struct {
	// ClientCA is the PEM bundle of the client certificate CAs (the api
	// server's --client-ca-file).
	ClientCA []byte
	// RequestHeaderCA is the PEM bundle of the front-proxy CA
	// (--requestheader-client-ca-file); empty: no requestheader keys.
	RequestHeaderCA []byte
	// AllowedNames are the front-proxy client certificates' common names
	// (--requestheader-allowed-names; empty: any the CA signed).
	AllowedNames []string
	// UsernameHeaders, GroupHeaders and ExtraHeaderPrefixes name the
	// user in a proxied request (default X-Remote-User, X-Remote-Group,
	// X-Remote-Extra-: what podflow's aggregator sends).
	UsernameHeaders, GroupHeaders, ExtraHeaderPrefixes []string
	// Interval between passes (default 1m, kube's).
	Interval time.Duration
	// RetryMin and RetryMax bound the backoff of a failed first pass
	// (default 100ms, 5s).
	RetryMin, RetryMax time.Duration
}

// DefaultConfig returns the defaults documented on Config (the CAs are
// still to be set).
func DefaultConfig() Config {
	return Config{UsernameHeaders: []string{DefaultUsernameHeader}, GroupHeaders: []string{DefaultGroupHeader},
		ExtraHeaderPrefixes: []string{DefaultExtraHeadersPfx}, Interval: time.Minute,
		RetryMin: 100 * time.Millisecond, RetryMax: 5 * time.Second}
}

// Validate checks the Config: ClientCA must hold a certificate, and so
// must RequestHeaderCA unless it is empty.
func (c Config) Validate() error {
	if _, err := parseCerts(c.ClientCA); err != nil {
		return fmt.Errorf("authtrust: ClientCA: %w", err)
	}
	if len(c.RequestHeaderCA) > 0 {
		if _, err := parseCerts(c.RequestHeaderCA); err != nil {
			return fmt.Errorf("authtrust: RequestHeaderCA: %w", err)
		}
	}
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("authtrust: Interval (%s) must be positive", c.Interval)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("authtrust: RetryMin (%s) must be positive and at most RetryMax (%s)", c.RetryMin, c.RetryMax)
	}
	return nil
}

// Controller keeps the ConfigMap.
type Controller struct {
	env stage.Env
	cfg Config
}

var _ stage.Starter = (*Controller)(nil)

// New returns a Controller over env's store.
func New(env stage.Env, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Controller{env: env, cfg: cfg}, nil
}

// Start makes a first pass, retried with backoff until it succeeds or ctx
// ends, then passes again every Interval on g.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	g.Go(func() error {
		wait := c.cfg.RetryMin
		for {
			err := c.Pass(ctx)
			next := c.cfg.Interval
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if c.env.Log != nil {
					c.env.Log.Warn("authtrust: pass failed; retrying", "in", wait, "err", err)
				}
				next, wait = wait, min(2*wait, c.cfg.RetryMax)
			} else {
				wait = c.cfg.RetryMin
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(next):
			}
		}
	})
	return nil
}

// Pass makes the ConfigMap hold this api server's trust, once: created
// when missing, updated (compare-and-swap) when it lacks some of it.
func (c *Controller) Pass(ctx context.Context) error {
	cur, err := objects.Get[*corev1.ConfigMap](ctx, c.env.Store, Namespace, Name)
	if err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		return err
	}
	want, err := c.data(cur.GetData())
	if err != nil {
		return err
	}
	if cur == nil {
		cm := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: Namespace, Name: Name, Uid: uuid.NewString(),
			CreationTimestamp: timestamppb.Now()}, Data: want}
		_, err := c.env.Store.Create(ctx, cm)
		if errors.Is(err, raftstore.ErrAlreadyExists) {
			return nil // another replica's; the next pass merges into it
		}
		return err
	}
	if maps.Equal(cur.GetData(), want) {
		return nil
	}
	next := proto.CloneOf(cur)
	next.Data = want
	_, err = c.env.Store.Update(ctx, next)
	return err
}

// data is the ConfigMap's data: old's combined with the Config's, as
// kube's combinedClusterAuthenticationInfo and getConfigMapDataFor.
func (c *Controller) data(old map[string]string) (map[string]string, error) {
	out := map[string]string{}
	ca, err := combineCAs([]byte(old[KeyClientCA]), c.cfg.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyClientCA, err)
	}
	if len(ca) > 0 {
		out[KeyClientCA] = string(ca)
	}
	rh, err := combineCAs([]byte(old[KeyRequestHeaderCA]), c.cfg.RequestHeaderCA)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyRequestHeaderCA, err)
	}
	if len(rh) == 0 {
		return out, nil
	}
	out[KeyRequestHeaderCA] = string(rh)
	for _, k := range []struct {
		key  string
		mine []string
	}{
		{KeyUsernameHeaders, c.cfg.UsernameHeaders}, {KeyGroupHeaders, c.cfg.GroupHeaders},
		{KeyExtraHeadersPrefix, c.cfg.ExtraHeaderPrefixes}, {KeyAllowedNames, c.cfg.AllowedNames},
	} {
		var have []string
		if s := old[k.key]; s != "" {
			if err := json.Unmarshal([]byte(s), &have); err != nil {
				have = nil // not kube's format: replaced
			}
		}
		for _, s := range k.mine {
			if !slices.Contains(have, s) {
				have = append(have, s)
			}
		}
		if have == nil {
			have = []string{}
		}
		b, err := json.Marshal(have)
		if err != nil {
			return nil, err
		}
		out[k.key] = string(b)
	}
	return out, nil
}

// combineCAs is the PEM bundle of the unexpired certificates of old and
// mine, each once, old's first (unparseable old content is dropped).
func combineCAs(old, mine []byte) ([]byte, error) {
	certs, _ := parseCerts(old)
	m, err := parseCerts(mine)
	if len(mine) > 0 && err != nil {
		return nil, err
	}
	now := time.Now()
	var buf bytes.Buffer
	seen := map[string]bool{}
	for _, c := range append(certs, m...) {
		if seen[string(c.Raw)] || now.After(c.NotAfter) {
			continue
		}
		seen[string(c.Raw)] = true
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// parseCerts parses every CERTIFICATE block of b; it fails on none.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

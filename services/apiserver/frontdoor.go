package apiserver

import (
	"context"
	"fmt"
	jose "github.com/go-jose/go-jose/v4"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/webhook"
)

// FrontDoor runs the HTTPS server of an api process over its api stage
// replica: the stage authenticates, authorizes and serves the object
// requests (Backend) in process; the front door adds the node relays
// (NodeRelays: pods/exec, attach, port-forward, pods/log, metrics.k8s.io)
// and the TokenRequest API signed with Tokens.
type FrontDoor struct {
	Config  Config
	Backend Backend
	Store   *objects.Store
	// NATS is the api process's connection, which the relays use.
	NATS *nats.Conn
	// Tokens signs bound ServiceAccount tokens (TokenRequest, `kubectl
	// create token`); nil: TokenRequest answers 404.
	Tokens *auth.BoundTokens
	// Pods, when set, serves the front door also on the machine's pod
	// network gateways (PodListeners), with Config.Addr's port.
	Pods *PodListeners
	Log  *slog.Logger
}

// Start listens on Config.Addr and serves until ctx is done, on g; it
// returns once the server listens.
func (f FrontDoor) Start(ctx context.Context, g *errgroup.Group) error {
	if f.Pods != nil && (f.Pods.Port <= 0 || f.Pods.Port > 65535 || f.Pods.Store == nil) {
		return fmt.Errorf("%w: PodListeners needs a Store and a Port, got port %d", ErrInvalidConfig, f.Pods.Port)
	}
	srv, err := New(f.Config, frontBackend{Backend: f.Backend, NodeRelays: NodeRelays{NATS: f.NATS}, tokens: f.Tokens}, f.Store, f.Log)
	if err != nil {
		return err
	}
	l, err := Listen(ctx, f.Config.Addr)
	if err != nil {
		return fmt.Errorf("apiserver: listen %q: %w", f.Config.Addr, err)
	}
	g.Go(func() error { return srv.Serve(ctx, l) })
	g.Go(func() error { srv.checkAPIServices(ctx); return nil }) // aggregator.go
	if f.Pods != nil {
		f.Pods.run(ctx, g, srv)
	}
	return nil
}

// frontBackend is the stage's Backend with the node relays and the token
// signer beside it.
type frontBackend struct {
	Backend
	NodeRelays
	tokens *auth.BoundTokens
}

var (
	_ StreamBackend   = frontBackend{}
	_ LogBackend      = frontBackend{}
	_ MetricsBackend  = frontBackend{}
	_ TokenIssuer     = frontBackend{}
	_ TokenReviewer   = frontBackend{}
	_ WebhookBackend  = frontBackend{}
	_ IssuerPublisher = frontBackend{}
)

// Webhooks implements WebhookBackend with the stage's dynamic admission
// (nil when the stage has none): the CONNECTs and pod updates the front
// door admits itself go through the same webhooks and policies.
func (b frontBackend) Webhooks() webhook.Admitter {
	if wb, ok := b.Backend.(WebhookBackend); ok {
		return wb.Webhooks()
	}
	return nil
}

// ReviewToken implements TokenReviewer when the stage does.
func (b frontBackend) ReviewToken(token string, audiences []string) (auth.TokenReviewResult, bool, error) {
	tr, ok := b.Backend.(TokenReviewer)
	if !ok {
		return auth.TokenReviewResult{}, false, ErrNoTokenReviewer
	}
	return tr.ReviewToken(token, audiences)
}

// ServiceAccountIssuer implements IssuerPublisher.
func (b frontBackend) ServiceAccountIssuer() (string, jose.JSONWebKeySet, error) {
	if b.tokens == nil {
		return "", jose.JSONWebKeySet{}, ErrNoTokenIssuer
	}
	keys, err := b.tokens.KeySet()
	return b.tokens.Issuer(), keys, err
}

// IssueServiceAccountToken implements TokenIssuer.
func (b frontBackend) IssueServiceAccountToken(namespace, name, uid string, obj auth.BoundObject, audiences []string, expiration time.Duration) (string, time.Time, error) {
	if b.tokens == nil {
		return "", time.Time{}, ErrNoTokenIssuer
	}
	return b.tokens.Issue(namespace, name, uid, obj, audiences, expiration, time.Now())
}

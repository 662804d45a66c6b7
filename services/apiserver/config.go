package apiserver

import (
	"context"
	"fmt"
	"net"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/podsecurity"
)

// Config configures the HTTPS server.
type Config struct {
	// Addr is the TCP address to listen on ("127.0.0.1:6443"). The socket
	// is opened with SO_REUSEPORT, so every api replica of one
	// machine binds the same address and the kernel spreads connections
	// over them: one kubeconfig server for all replicas, and a replica that
	// dies only takes its own connections with it.
	Addr string
	// CertFile and KeyFile are the PEM serving certificate and key.
	CertFile, KeyFile string
	// ClientCAFile is the PEM bundle of CAs whose client certificates are
	// accepted (CN = user name, O = groups). Empty disables X.509 client
	// authentication.
	ClientCAFile string
	// ProxyClientCertFile and ProxyClientKeyFile are the front-proxy
	// client certificate presented to extension API servers behind
	// APIServices (kube-apiserver's --proxy-client-cert-file and
	// --proxy-client-key-file); the servers trust it through the
	// requestheader client CA. Empty: none is presented.
	ProxyClientCertFile, ProxyClientKeyFile string
	// RequestHeaderClientCAFile is the front-proxy CA (PEM) that signs
	// the proxy client certificate, and RequestHeaderAllowedNames its
	// common names (kube-apiserver's --requestheader-client-ca-file and
	// --requestheader-allowed-names): published, with ClientCAFile, in
	// kube-system/extension-apiserver-authentication for extension API
	// servers (services/stages/authtrust). Empty: not published.
	RequestHeaderClientCAFile string
	RequestHeaderAllowedNames []string
	// APIServiceCheckPeriod is the time between two checks of the
	// extension API servers behind APIServices, which set their
	// Available condition (aggregator.go). Default 10s.
	APIServiceCheckPeriod time.Duration
	// OIDC enables OpenID Connect ID token authentication when IssuerURL
	// is set.
	OIDC OIDCConfig
	// Anonymous lets requests without credentials through as
	// system:anonymous (group system:unauthenticated), to be authorized by
	// RBAC like any user. Default false: they get 401.
	Anonymous bool
	// MaxBodyBytes bounds a request body; larger bodies get 413 before they
	// are parsed. It bounds a patched object too (413 before it is
	// decoded). Default 3 MiB, kube-apiserver's limit.
	MaxBodyBytes int64
	// JSONPatchMaxCopyBytes bounds the bytes the copy operations of one
	// JSON patch add in total; a patch past it gets 422 naming the limit.
	// Default 3 MiB, kube-apiserver's JSONPatchMaxCopyBytes. (A JSON patch
	// also has at most MaxJSONPatchOperations operations: 413.)
	JSONPatchMaxCopyBytes int64
	// BodyReadTimeout bounds the reading of a request body, from the end
	// of its headers: a body sent slower gets 408 and the connection is
	// closed, so a slow client cannot hold an in-flight slot. Headers have
	// 10s (http.Server ReadHeaderTimeout). Default 30s.
	BodyReadTimeout time.Duration
	// RequestTimeout bounds every non-watch request. Default 60s.
	RequestTimeout time.Duration
	// BookmarkInterval is how often a watch that asked for bookmarks
	// (allowWatchBookmarks=true) gets a BOOKMARK event. Default 10s.
	BookmarkInterval time.Duration
	// MaxInFlight bounds the read-only requests (GET and HEAD that are not
	// watches) served at once; more get 429 Too Many Requests with
	// Retry-After, as kube-apiserver's --max-requests-inflight. Default 400.
	MaxInFlight int
	// MaxMutatingInFlight bounds the mutating requests (POST, PUT, PATCH,
	// DELETE) served at once: 429 beyond, as kube-apiserver's
	// --max-mutating-requests-inflight. Default 200.
	MaxMutatingInFlight int
	// MaxWatches bounds the watches open at once (a GET with a watch
	// parameter other than "0" or "false"): long-running requests are exempt from MaxInFlight, as in
	// kube-apiserver, but counted here: 429 beyond. Default 2000.
	MaxWatches int
	// MaxWatchesPerUser and MaxMutatingPerUser are each user's seats
	// inside MaxWatches (long-running requests: watches, exec, attach,
	// port-forward, followed logs) and MaxMutatingInFlight: 429 with
	// Retry-After past them, so that one user cannot take a pool from
	// the others (the idea of API Priority and Fairness; system:masters
	// and system:nodes exempt). 0: a quarter of the pool (at least 1),
	// 500 and 50 by default.
	MaxWatchesPerUser  int
	MaxMutatingPerUser int
	// TooLargeResourceVersionWait is how long a watch from a revision the
	// store has not reached yet waits for it before it is answered 504
	// "Too large resource version" (kube-apiserver's watch cache waits 3s).
	// Default 3s.
	TooLargeResourceVersionWait time.Duration
	// ListSnapshotTTL is how long the snapshot behind a paged list (limit
	// and continue) is kept: a continue token older than that gets 410
	// Expired, as one older than etcd's compaction (every 5 minutes in
	// kube-apiserver) does. Default 5m.
	ListSnapshotTTL time.Duration
	// MaxListSnapshots bounds the paged lists whose snapshots are kept at
	// once (the oldest is dropped first). Default 64.
	MaxListSnapshots int
	// CacheObjects bounds the cache of objects' Kubernetes forms (by key
	// and revision) that makes repeated lists cheap. Default 100000.
	CacheObjects int
	// MaxWatchTimeout caps a watch's timeoutSeconds; watches without one
	// end after a random time in [MaxWatchTimeout/2, MaxWatchTimeout),
	// so that clients reconnect spread over time. Default 30m.
	MaxWatchTimeout time.Duration
	// ProxyDialContext dials the pods that pods/proxy and services/proxy
	// reach, once the address has been checked to be a pod's (proxy.go).
	// Default: a net.Dialer with a 30s timeout. Tests point it at
	// loopback.
	ProxyDialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// PodSecurityDefault is the Pod Security level enforced on pod
	// updates (a new image, an ephemeral container) in a namespace
	// without the pod-security.kubernetes.io/enforce label, as
	// kube-apiserver's PodSecurity admission configuration
	// defaults.enforce; the admission stage enforces the same level on
	// creation. "" is privileged, Kubernetes' default.
	PodSecurityDefault podsecurity.Level
	// Printer prints the tables of generic kinds (kubectl get) with
	// kube-apiserver's columns: services/registry's Registry. Nil: their
	// tables have name and age only.
	Printer Printer
	// CustomResources serves CustomResourceDefinitions' objects beside
	// the built-in kinds (customresources.go): the process's catalog,
	// which its api stage writes through too. Nil: none.
	CustomResources *crd.Catalog
}

// Printer is kube-apiserver's table printing of built-in kinds
// (services/registry's Registry implements it). Safe for concurrent use.
type Printer interface {
	// TableColumns returns gvk's columns, every one with its priority;
	// ok false when there is no printer for gvk.
	TableColumns(gvk schema.GroupVersionKind) (cols []metav1.TableColumnDefinition, ok bool)
	// TableCells returns the cells of obj's row, in TableColumns' order.
	TableCells(obj runtime.Object) ([]any, error)
}

// OIDCConfig configures OpenID Connect ID token verification, as
// kube-apiserver's --oidc-* flags do. Keys are given locally (no discovery
// over the network): a JWKS document or PEM public keys.
type OIDCConfig struct {
	// IssuerURL must equal the token's "iss" claim.
	IssuerURL string
	// ClientID must be among the token's "aud" claim.
	ClientID string
	// KeysFile holds the issuer's signing keys: a JWKS JSON document
	// ({"keys": [...]}) or one or more PEM public keys (RSA or ECDSA).
	KeysFile string
	// UsernameClaim names the claim holding the user name. Default "sub".
	UsernameClaim string
	// UsernamePrefix is prepended to the user name. Default: the issuer
	// URL and "#" when UsernameClaim is not "email" (as Kubernetes does);
	// "-" means no prefix.
	UsernamePrefix string
	// GroupsClaim names the claim holding the groups (a string or a list of
	// strings). Empty: no groups from the token.
	GroupsClaim string
	// GroupsPrefix is prepended to every group.
	GroupsPrefix string
}

// DefaultConfig returns the defaults documented on Config; Addr, the
// certificate files and the CA must still be set.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:                3 << 20,
		JSONPatchMaxCopyBytes:       3 << 20,
		BodyReadTimeout:             30 * time.Second,
		RequestTimeout:              60 * time.Second,
		BookmarkInterval:            10 * time.Second,
		MaxWatchTimeout:             30 * time.Minute,
		CacheObjects:                100_000,
		APIServiceCheckPeriod:       10 * time.Second,
		ListSnapshotTTL:             5 * time.Minute,
		MaxListSnapshots:            64,
		MaxInFlight:                 400,
		MaxMutatingInFlight:         200,
		MaxWatches:                  2000,
		TooLargeResourceVersionWait: 3 * time.Second,
		OIDC:                        OIDCConfig{UsernameClaim: "sub"},
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Addr == "":
		return fmt.Errorf("%w: Addr is empty", ErrInvalidConfig)
	case c.CertFile == "" || c.KeyFile == "":
		return fmt.Errorf("%w: CertFile and KeyFile are required", ErrInvalidConfig)
	case c.APIServiceCheckPeriod <= 0:
		return fmt.Errorf("%w: APIServiceCheckPeriod (%s) must be positive", ErrInvalidConfig, c.APIServiceCheckPeriod)
	case (c.ProxyClientCertFile == "") != (c.ProxyClientKeyFile == ""):
		return fmt.Errorf("%w: ProxyClientCertFile and ProxyClientKeyFile go together", ErrInvalidConfig)
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("%w: MaxBodyBytes (%d) must be at least 1024", ErrInvalidConfig, c.MaxBodyBytes)
	case c.JSONPatchMaxCopyBytes < 1:
		return fmt.Errorf("%w: JSONPatchMaxCopyBytes (%d) must be positive", ErrInvalidConfig, c.JSONPatchMaxCopyBytes)
	case c.BodyReadTimeout <= 0:
		return fmt.Errorf("%w: BodyReadTimeout (%s) must be positive", ErrInvalidConfig, c.BodyReadTimeout)
	case c.TooLargeResourceVersionWait <= 0:
		return fmt.Errorf("%w: TooLargeResourceVersionWait (%s) must be positive", ErrInvalidConfig, c.TooLargeResourceVersionWait)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("%w: RequestTimeout (%s) must be positive", ErrInvalidConfig, c.RequestTimeout)
	case c.BookmarkInterval <= 0:
		return fmt.Errorf("%w: BookmarkInterval (%s) must be positive", ErrInvalidConfig, c.BookmarkInterval)
	case c.MaxInFlight < 1 || c.MaxMutatingInFlight < 1 || c.MaxWatches < 1:
		return fmt.Errorf("%w: MaxInFlight (%d), MaxMutatingInFlight (%d) and MaxWatches (%d) must be at least 1",
			ErrInvalidConfig, c.MaxInFlight, c.MaxMutatingInFlight, c.MaxWatches)
	case c.PodSecurityDefault != "" && !c.PodSecurityDefault.Valid():
		return fmt.Errorf("%w: PodSecurityDefault %q is not one of privileged, baseline, restricted", ErrInvalidConfig, c.PodSecurityDefault)
	case c.MaxWatchesPerUser < 0 || c.MaxWatchesPerUser > c.MaxWatches:
		return fmt.Errorf("%w: MaxWatchesPerUser (%d) must be in [0, MaxWatches (%d)]", ErrInvalidConfig, c.MaxWatchesPerUser, c.MaxWatches)
	case c.MaxMutatingPerUser < 0 || c.MaxMutatingPerUser > c.MaxMutatingInFlight:
		return fmt.Errorf("%w: MaxMutatingPerUser (%d) must be in [0, MaxMutatingInFlight (%d)]", ErrInvalidConfig, c.MaxMutatingPerUser, c.MaxMutatingInFlight)
	case c.CacheObjects < 1:
		return fmt.Errorf("%w: CacheObjects (%d) must be at least 1", ErrInvalidConfig, c.CacheObjects)
	case c.ListSnapshotTTL <= 0 || c.MaxListSnapshots < 1:
		return fmt.Errorf("%w: ListSnapshotTTL (%s) must be positive and MaxListSnapshots (%d) at least 1", ErrInvalidConfig, c.ListSnapshotTTL, c.MaxListSnapshots)
	case c.MaxWatchTimeout < 2*time.Second:
		return fmt.Errorf("%w: MaxWatchTimeout (%s) must be at least 2s", ErrInvalidConfig, c.MaxWatchTimeout)
	}
	if c.OIDC.IssuerURL != "" {
		switch {
		case c.OIDC.ClientID == "":
			return fmt.Errorf("%w: OIDC.ClientID is required with OIDC.IssuerURL", ErrInvalidConfig)
		case c.OIDC.KeysFile == "":
			return fmt.Errorf("%w: OIDC.KeysFile is required with OIDC.IssuerURL", ErrInvalidConfig)
		case c.OIDC.UsernameClaim == "":
			return fmt.Errorf("%w: OIDC.UsernameClaim is empty", ErrInvalidConfig)
		}
	}
	return nil
}

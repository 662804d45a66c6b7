package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/roles"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/podsecurity"
)

func init() { register(newStageCmd) }

func newStageCmd() *cobra.Command { return stageCmd(roles.Stage) }

// stageCmd is `podflow stage`, running the replica with run.
func stageCmd(run func(ctx context.Context, name string, o roles.StageOptions) error) *cobra.Command {
	var o roles.StageOptions
	var https httpsOptions
	cmd := &cobra.Command{
		Use:   "stage NAME",
		Short: "Run one replica of a lifecycle stage (" + strings.Join(pipeline.Stages, ", ") + ")",
		Long: `Run one replica of a lifecycle stage. Every replica of a stage shares the
stage's durable JetStream consumer, so starting another replica splits the
work; stopping one (even with SIGKILL) loses nothing: what it had not acked
is redelivered to the others.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.HTTPS = https.config()
			if o.HTTPS != nil {
				o.HTTPS.PodSecurityDefault = podsecurity.Level(o.PodSecurityDefault)
			}
			return run(cmd.Context(), args[0], o)
		},
	}
	configFlag(cmd, &o.Config)
	f := cmd.Flags()
	f.StringVar(&o.Replica, "replica", "", "replica name (default NAME-HOST-PID)")
	f.StringVar(&o.TokenFile, "token-file", "", "api: static token file (kube-apiserver --token-auth-file format)")
	f.StringVar(&o.SealKeyFile, "seal-key", "", "api: key pair bearer tokens on the bus are sealed to (created if missing)")
	f.StringVar(&o.ServiceAccountKeyFile, "service-account-signing-key-file", "", "api: ECDSA P-256 key (PEM) signing bound ServiceAccount tokens, the TokenRequest API (created if missing; share it between api replicas)")
	f.Float64Var(&o.EventsHighWater, "events-high-water", 0, "api: refuse new pods (429) once PODFLOW_EVENTS holds this fraction of its max bytes (default 0.9)")
	f.Float64Var(&o.UserPodQPS, "user-pod-qps", 0, "api: pod creations per second per user, system:masters exempt (default 100; negative for no limit)")
	f.StringVar(&o.ServiceCIDR, plan.ServiceCIDRFlag, "", "api: the service CIDR ClusterIPs are allocated from (default "+plan.DefaultServiceCIDR+"; the node agents' must be the same)")
	f.IntVar(&o.UserPodBurst, "user-pod-burst", 0, "api: burst of a user's pod creations (default 200)")
	f.StringVar(&o.RootCAFile, "root-ca-file", "", "rootcacert: the CA bundle (PEM) published as kube-root-ca.crt in every namespace")
	f.StringVar(&o.PodSecurityDefault, plan.PodSecurityDefaultFlag, "", "api and admission: Pod Security level of namespaces without the enforce label (privileged, baseline, restricted; default privileged)")
	f.DurationVar(&o.NodeGrace, "node-monitor-grace-period", 0, "nodelifecycle: a node silent this long is Unknown and tainted (default 40s)")
	f.DurationVar(&o.EventTTL, "event-ttl", 0, "status: delete Events last seen longer ago than this (default 1h, as kube-apiserver's --event-ttl)")
	f.BoolVar(&o.Provision, "provision", false, "declare the single-server streams and consumers before starting ('podflow up' does it for its stages)")
	f.StringVar(&o.Metrics, "metrics-addr", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9100)")
	f.DurationVar(&o.Resync, "resync", 10*time.Second, "period of reconciliation from the store")
	h := &https
	f.StringVar(&h.addr, "https-addr", "", "api: serve the Kubernetes API over HTTPS on this address (SO_REUSEPORT: every api replica may bind the same one)")
	f.StringVar(&h.certFile, "tls-cert-file", "", "api: HTTPS serving certificate (PEM)")
	f.StringVar(&h.keyFile, "tls-private-key-file", "", "api: HTTPS serving key (PEM)")
	f.StringVar(&h.clientCA, "client-ca-file", "", "api: accept client certificates signed by these CAs (CN = user, O = groups)")
	f.StringVar(&h.proxyCert, "proxy-client-cert-file", "", "api: the front-proxy client certificate (PEM) the aggregator presents to extension API servers")
	f.StringVar(&h.proxyKey, "proxy-client-key-file", "", "api: the front-proxy client certificate's key (PEM)")
	f.StringVar(&h.requestHeaderCA, "requestheader-client-ca-file", "", "api: the front-proxy CA (PEM), published for extension API servers in kube-system/extension-apiserver-authentication")
	f.StringSliceVar(&h.allowedNames, "requestheader-allowed-names", nil, "api: the front-proxy client certificates' common names, published with the front-proxy CA")
	f.StringVar(&h.oidc.IssuerURL, "oidc-issuer-url", "", "api: accept OIDC ID tokens from this issuer")
	f.StringVar(&h.oidc.ClientID, "oidc-client-id", "", "api: the audience OIDC ID tokens must carry")
	f.StringVar(&h.oidc.KeysFile, "oidc-keys-file", "", "api: the OIDC issuer's signing keys (JWKS JSON or PEM public keys)")
	f.StringVar(&h.oidc.UsernameClaim, "oidc-username-claim", "sub", "api: the ID token claim holding the user name")
	f.StringVar(&h.oidc.UsernamePrefix, "oidc-username-prefix", "", "api: prefix of OIDC user names (default ISSUER#, \"-\" for none)")
	f.StringVar(&h.oidc.GroupsClaim, "oidc-groups-claim", "", "api: the ID token claim holding the groups")
	f.StringVar(&h.oidc.GroupsPrefix, "oidc-groups-prefix", "", "api: prefix of OIDC groups")
	f.BoolVar(&h.anonymous, "anonymous-auth", false, "api: let requests without credentials through as system:anonymous")
	f.Int64Var(&h.maxBodyBytes, "max-request-body-bytes", 0, "api: largest HTTPS request body (default 3 MiB)")
	return cmd
}

// httpsOptions are the api stage's HTTPS front door flags, named as
// kube-apiserver names them.
type httpsOptions struct {
	addr, certFile, keyFile, clientCA string
	proxyCert, proxyKey               string
	requestHeaderCA                   string
	allowedNames                      []string
	oidc                              apiserver.OIDCConfig
	anonymous                         bool
	maxBodyBytes                      int64
}

// config returns the HTTPS configuration, or nil without --https-addr.
func (h *httpsOptions) config() *apiserver.Config {
	if h.addr == "" {
		return nil
	}
	c := apiserver.DefaultConfig()
	c.Addr, c.CertFile, c.KeyFile, c.ClientCAFile, c.Anonymous = h.addr, h.certFile, h.keyFile, h.clientCA, h.anonymous
	c.OIDC = h.oidc
	c.ProxyClientCertFile, c.ProxyClientKeyFile = h.proxyCert, h.proxyKey
	c.RequestHeaderClientCAFile, c.RequestHeaderAllowedNames = h.requestHeaderCA, h.allowedNames
	if h.maxBodyBytes > 0 {
		c.MaxBodyBytes = h.maxBodyBytes
	}
	return &c
}

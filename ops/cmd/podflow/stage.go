package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/services/admission"
	"github.com/podflow/podflow/services/api"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/endpoints"
	"github.com/podflow/podflow/services/persistence"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/scheduler"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/status"
)

func init() { register(newStageCmd) }

// stageBuilders build a stage's handler; the scheduler registers its own.
var stageBuilders = map[string]func(env stage.Env, o *stageOptions) (stage.Handler, error){
	pipeline.API: func(env stage.Env, o *stageOptions) (stage.Handler, error) {
		cfg := api.DefaultConfig()
		cfg.TokenFile = o.tokenFile
		cfg.HTTPS = o.https.config()
		return api.New(env, cfg)
	},
	pipeline.Admission: func(env stage.Env, o *stageOptions) (stage.Handler, error) {
		cfg := admission.DefaultConfig()
		if o.pssDefault != "" {
			cfg.DefaultLevel = admission.Level(o.pssDefault)
		}
		return admission.NewStage(env, cfg)
	},
	pipeline.Persistence: func(env stage.Env, _ *stageOptions) (stage.Handler, error) {
		return persistence.New(env), nil
	},
	pipeline.Status: func(env stage.Env, o *stageOptions) (stage.Handler, error) {
		cfg := status.DefaultConfig()
		if o.nodeGrace > 0 {
			cfg.NodeMonitorGracePeriod = o.nodeGrace
		}
		if o.eventTTL > 0 {
			cfg.EventTTL = o.eventTTL
		}
		return status.NewStage(env, cfg)
	},
	pipeline.Endpoints: func(env stage.Env, _ *stageOptions) (stage.Handler, error) {
		return endpoints.NewStage(env)
	},
}

type stageOptions struct {
	config     string
	replica    string
	tokenFile  string
	pssDefault string
	nodeGrace  time.Duration
	eventTTL   time.Duration
	resync     time.Duration
	provision  bool
	metrics    string
	https      httpsOptions
}

func newStageCmd() *cobra.Command {
	o := &stageOptions{}
	cmd := &cobra.Command{
		Use:   "stage NAME",
		Short: "Run one replica of a lifecycle stage (" + strings.Join(pipeline.Stages, ", ") + ")",
		Long: `Run one replica of a lifecycle stage. Every replica of a stage shares the
stage's durable JetStream consumer, so starting another replica splits the
work; stopping one (even with SIGKILL) loses nothing: what it had not acked
is redelivered to the others.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			build, ok := stageBuilders[name]
			if !ok {
				return fmt.Errorf("unknown stage %q (stages: %s)", name, strings.Join(pipeline.Stages, ", "))
			}
			cfg, err := client.LoadConfig(o.config)
			if err != nil {
				return err
			}
			replica := o.replica
			if replica == "" {
				host, _ := os.Hostname()
				replica = fmt.Sprintf("%s-%s-%d", name, host, os.Getpid())
			}
			ctx := cmd.Context()
			sess, err := client.Connect(ctx, cfg, replica)
			if err != nil {
				return err
			}
			defer sess.Close()
			log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("stage", name, "replica", replica)
			env := stage.Env{Bus: sess.Bus, Store: sess.Store, Stage: name, Replica: replica, Log: log}
			h, err := build(env, o)
			if err != nil {
				return err
			}
			rc, err := pipeline.RunnerConfig(name, replica)
			if err != nil {
				return err
			}
			if o.provision {
				if err := provision(ctx, sess.Bus, bus.DefaultStreamsConfig()); err != nil {
					return err
				}
			}
			log.Info("stage started")
			metrics := stage.NewMetrics(name)
			if r, ok := h.(interface {
				RegisterMetrics(prometheus.Registerer) error
			}); ok {
				if err := r.RegisterMetrics(metrics.Registry); err != nil {
					return err
				}
			}
			tracing, err := stage.TracingFromEnv(ctx, name, replica)
			if err != nil {
				return err
			}
			if tracing != nil {
				defer tracing.Shutdown(context.WithoutCancel(ctx))
				log.Info("exporting OpenTelemetry spans over OTLP")
			}
			err = stage.Run(ctx, env, h, stage.Config{Runner: rc, ResyncPeriod: o.resync, MetricsAddr: o.metrics, Metrics: metrics, Tracing: tracing,
				OnMetrics: func(addr string) { log.Info("serving metrics", "addr", "http://"+addr+"/metrics") }})
			log.Info("stage stopped", "err", err)
			return err
		},
	}
	configFlag(cmd, &o.config)
	f := cmd.Flags()
	f.StringVar(&o.replica, "replica", "", "replica name (default NAME-HOST-PID)")
	f.StringVar(&o.tokenFile, "token-file", "", "api: static token file (kube-apiserver --token-auth-file format)")
	f.StringVar(&o.pssDefault, "pod-security-default", "", "admission: Pod Security level of namespaces without the enforce label (privileged, baseline, restricted)")
	f.DurationVar(&o.nodeGrace, "node-monitor-grace-period", 0, "status: mark a node NotReady after this long without heartbeats (default 40s)")
	f.DurationVar(&o.eventTTL, "event-ttl", 0, "status: delete Events last seen longer ago than this (default 1h, as kube-apiserver's --event-ttl)")
	f.BoolVar(&o.provision, "provision", false, "declare the single-server streams and consumers before starting (`podflow up` does it for its stages)")
	f.StringVar(&o.metrics, "metrics-addr", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9100)")
	f.DurationVar(&o.resync, "resync", 10*time.Second, "period of reconciliation from the store")
	h := &o.https
	f.StringVar(&h.addr, "https-addr", "", "api: serve the Kubernetes API over HTTPS on this address (SO_REUSEPORT: every api replica may bind the same one)")
	f.StringVar(&h.certFile, "tls-cert-file", "", "api: HTTPS serving certificate (PEM)")
	f.StringVar(&h.keyFile, "tls-private-key-file", "", "api: HTTPS serving key (PEM)")
	f.StringVar(&h.clientCA, "client-ca-file", "", "api: accept client certificates signed by these CAs (CN = user, O = groups)")
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

func init() {
	stageBuilders[pipeline.Scheduler] = func(env stage.Env, o *stageOptions) (stage.Handler, error) {
		return scheduler.NewStage(env, scheduler.DefaultStageConfig())
	}
}

// httpsOptions are the api stage's HTTPS front door flags, named as
// kube-apiserver names them.
type httpsOptions struct {
	addr, certFile, keyFile, clientCA string
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
	if h.maxBodyBytes > 0 {
		c.MaxBodyBytes = h.maxBodyBytes
	}
	return &c
}

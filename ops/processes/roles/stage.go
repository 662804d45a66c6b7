package roles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/crd"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/quota"
	"github.com/podflow/podflow/services/registry"
	"github.com/podflow/podflow/services/sealed"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/admission"
	"github.com/podflow/podflow/services/stages/api"
	"github.com/podflow/podflow/services/stages/authtrust"
	"github.com/podflow/podflow/services/stages/bootstrap"
	"github.com/podflow/podflow/services/stages/crds"
	"github.com/podflow/podflow/services/stages/cronjob"
	"github.com/podflow/podflow/services/stages/daemonset"
	"github.com/podflow/podflow/services/stages/deployment"
	"github.com/podflow/podflow/services/stages/disruption"
	"github.com/podflow/podflow/services/stages/endpoints"
	"github.com/podflow/podflow/services/stages/garbagecollector"
	"github.com/podflow/podflow/services/stages/job"
	"github.com/podflow/podflow/services/stages/kubernetesservice"
	"github.com/podflow/podflow/services/stages/namespace"
	"github.com/podflow/podflow/services/stages/nodelifecycle"
	"github.com/podflow/podflow/services/stages/persistence"
	"github.com/podflow/podflow/services/stages/replicaset"
	"github.com/podflow/podflow/services/stages/resourcequota"
	"github.com/podflow/podflow/services/stages/rootcacert"
	"github.com/podflow/podflow/services/stages/scheduler"
	"github.com/podflow/podflow/services/stages/serviceaccount"
	"github.com/podflow/podflow/services/stages/statefulset"
	"github.com/podflow/podflow/services/stages/status"
	"github.com/podflow/podflow/services/stages/ttlafterfinished"
	webhookkube "github.com/podflow/podflow/services/webhook/kube"
)

// stageBuilders build a stage's handler.
var stageBuilders = map[string]func(env stage.Env, o StageOptions) (stage.Handler, error){
	pipeline.API: APIProcess,
	pipeline.Admission: func(env stage.Env, o StageOptions) (stage.Handler, error) {
		cfg := admission.DefaultConfig()
		if o.PodSecurityDefault != "" {
			cfg.DefaultLevel = admission.Level(o.PodSecurityDefault)
		}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("--pod-security-default: %w", err)
		}
		// The admission webhooks and policies, kube-apiserver's plugins
		// over the store. matchConditions' authorizer has no RBAC here:
		// its checks are denied (docs/admission.md).
		hooks, err := webhookkube.New(webhookkube.Config{Store: env.Store})
		if err != nil {
			return nil, err
		}
		cfg.Webhooks = hooks
		cfg.Quota = quota.NewAdmission(env.Store)
		st, err := admission.NewStage(env, cfg)
		if err != nil {
			return nil, err
		}
		return stage.Compose(st, hooks), nil
	},
	pipeline.Persistence: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return persistence.New(env), nil
	},
	pipeline.Scheduler: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return scheduler.NewStage(env, scheduler.DefaultStageConfig())
	},
	pipeline.Status: func(env stage.Env, o StageOptions) (stage.Handler, error) {
		cfg := status.DefaultConfig()
		if o.EventTTL > 0 {
			cfg.EventTTL = o.EventTTL
		}
		return status.NewStage(env, cfg)
	},
	pipeline.Endpoints: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return endpoints.NewStage(env)
	},
	pipeline.ResourceQuota: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return resourcequota.New(env, resourcequota.DefaultConfig())
	},
	pipeline.GarbageCollector: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		gc, err := garbagecollector.New(env, garbagecollector.DefaultConfig())
		if err != nil {
			return nil, err
		}
		// The CustomResourceDefinitions' catalog registers their kinds in
		// the process, so that custom resources are owners and dependents
		// like built-in objects.
		cat, err := crd.NewCatalog(crd.Config{Store: env.Store, Log: env.Log})
		if err != nil {
			return nil, err
		}
		return stage.Compose(gc, cat), nil
	},
	pipeline.ServiceAccount: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return serviceaccount.New(env, serviceaccount.DefaultConfig())
	},
	pipeline.ReplicaSet:            replicaSetStage,
	pipeline.ReplicationController: replicaSetStage,
	pipeline.CronJob: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return cronjob.New(env, cronjob.DefaultConfig(env.Replica))
	},
	pipeline.Job: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return job.New(env, job.DefaultConfig(env.Replica), controller.NATSRequester(env.NATS))
	},
	pipeline.TTLAfterFinished: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return ttlafterfinished.New(env, ttlafterfinished.DefaultConfig(env.Replica))
	},
	pipeline.Deployment: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return deployment.New(env, deployment.DefaultConfig(env.Replica))
	},
	pipeline.StatefulSet: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return statefulset.New(env, statefulset.DefaultConfig(env.Replica), controller.NATSRequester(env.NATS))
	},
	pipeline.Disruption: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return disruption.New(env, disruption.DefaultConfig(env.Replica))
	},
	pipeline.DaemonSet: func(env stage.Env, _ StageOptions) (stage.Handler, error) {
		return daemonset.New(env, daemonset.DefaultConfig(env.Replica), controller.NATSRequester(env.NATS))
	},
	pipeline.RootCACert: func(env stage.Env, o StageOptions) (stage.Handler, error) {
		cfg := rootcacert.DefaultConfig()
		if o.RootCAFile == "" {
			return nil, fmt.Errorf("%s: --root-ca-file is required", pipeline.RootCACert)
		}
		var err error
		if cfg.RootCA, err = os.ReadFile(o.RootCAFile); err != nil {
			return nil, fmt.Errorf("%s: %w", pipeline.RootCACert, err)
		}
		return rootcacert.New(env, cfg)
	},
	pipeline.NodeLifecycle: NodeLifecycle,
}

// NodeLifecycle is the node lifecycle controller stage: nodes that stop
// heartbeating go Unknown and are tainted; their pods are marked not
// ready and evicted after their tolerationSeconds, as
// kube-controller-manager's node lifecycle and taint eviction
// controllers. It consumes no events (pipeline.Controller).
func NodeLifecycle(env stage.Env, o StageOptions) (stage.Handler, error) {
	cfg := nodelifecycle.DefaultConfig()
	if o.NodeGrace > 0 {
		cfg.GracePeriod = o.NodeGrace
		cfg.MonitorPeriod = min(cfg.MonitorPeriod, o.NodeGrace)
	}
	c, err := nodelifecycle.New(env, cfg)
	if err != nil {
		return nil, err
	}
	return stage.Compose(controllerHandler{}, c), nil
}

// controllerHandler is the Handler of a controller stage, which consumes
// no events: Handle is never called.
type controllerHandler struct{}

func (controllerHandler) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("a controller stage consumes no events"))
}

// replicaSetStage is a replica of the ReplicaSet or ReplicationController
// controller (the stage's name says which).
func replicaSetStage(env stage.Env, _ StageOptions) (stage.Handler, error) {
	return replicaset.New(env, replicaset.DefaultConfig(env.Stage, env.Replica), controller.NATSRequester(env.NATS))
}

// APIProcess composes an api replica's process: the api stage, with
// beside it the CustomResourceDefinitions' catalog (crd.Catalog), the
// namespace controller (which empties and removes deleted namespaces,
// with the api stage's identity), the CRD controller (services/stages/crds),
// the bootstrap controller (system namespaces, bootstrap RBAC), the node
// agents' token signer (apiserver.NodeTokens), the local APIServices
// (apiserver.LocalAPIServices) and, when o.HTTPS is set,
// the Kubernetes REST front door (apiserver.FrontDoor, also on the
// machine's pod network gateways) over the stage and the kubernetes
// Service's controller (its endpoints are the front doors' addresses), as
// kube-apiserver runs these.
func APIProcess(env stage.Env, o StageOptions) (stage.Handler, error) {
	cfg, err := APIConfig(o)
	if err != nil {
		return nil, err
	}
	if o.HTTPS != nil {
		if err := o.HTTPS.Validate(); err != nil {
			return nil, err
		}
	}
	nc := namespace.DefaultConfig()
	if nc.ServiceIPs, err = ipalloc.New(cfg.Services); err != nil {
		return nil, err
	}
	ns, err := namespace.New(env, nc)
	if err != nil {
		return nil, err
	}
	cfg.NamespaceDeleted = ns.Enqueue
	// kube-apiserver's strategies and printers for the generic kinds,
	// authorizing what they check themselves with the stage's RBAC.
	var s *api.Stage
	reg, err := registry.New(registry.Config{Store: env.Store, Authorize: func(a auth.Attributes) auth.Decision { return s.Authorize(a) }})
	if err != nil {
		return nil, err
	}
	// CustomResourceDefinitions: the catalog serves their objects through
	// the stage and the front door; the CRD controller names, establishes
	// and cleans them up.
	cat, err := crd.NewCatalog(crd.Config{Store: env.Store, Log: env.Log})
	if err != nil {
		return nil, err
	}
	crdc, err := crds.New(env, crds.DefaultConfig())
	if err != nil {
		return nil, err
	}
	cfg.Registry = crd.Registry{Builtin: reg, Catalog: cat}
	cfg.SyncKinds = cat.Sync
	// The admission webhooks and policies on every write of an object
	// (pods: the admission stage's), authorizing with the stage's RBAC.
	hooks, err := webhookkube.New(webhookkube.Config{Store: env.Store, Authorize: func(a auth.Attributes) auth.Decision { return s.Authorize(a) },
		CustomResources: cat})
	if err != nil {
		return nil, err
	}
	cfg.Webhooks = hooks
	cfg.Quota = quota.NewAdmission(env.Store)
	if s, err = api.New(env, cfg); err != nil {
		return nil, err
	}
	boot, err := bootstrap.New(env, bootstrap.DefaultConfig())
	if err != nil {
		return nil, err
	}
	parts := []stage.Starter{cat, hooks, ns, crdc, boot, &apiserver.NodeTokens{NATS: env.NATS, Store: env.Store, Tokens: cfg.Authn.BoundTokens, Workers: cfg.TokenWorkers, Log: env.Log, Cache: s},
		&apiserver.LocalAPIServices{Store: env.Store, Log: env.Log}}
	if o.HTTPS != nil {
		pods, err := podListeners(env, o.HTTPS.Addr)
		if err != nil {
			return nil, err
		}
		kc := kubernetesservice.DefaultConfig()
		kc.ServiceIPs, kc.Endpoint = nc.ServiceIPs, pods.Endpoint
		ks, err := kubernetesservice.New(env, kc)
		if err != nil {
			return nil, err
		}
		https := *o.HTTPS
		https.Printer = reg
		https.CustomResources = cat
		parts = append(parts,
			apiserver.FrontDoor{Config: https, Backend: s, Store: env.Store, NATS: env.NATS, Tokens: cfg.Authn.BoundTokens, Pods: pods, Log: env.Log},
			ks)
		if https.ClientCAFile != "" {
			trust, err := authTrust(env, https)
			if err != nil {
				return nil, err
			}
			parts = append(parts, trust)
		}
	}
	return stage.Compose(s, parts...), nil
}

// authTrust is the controller publishing the api server's client CA and
// front-proxy settings (kube-system/extension-apiserver-authentication).
func authTrust(env stage.Env, https apiserver.Config) (*authtrust.Controller, error) {
	c := authtrust.DefaultConfig()
	var err error
	if c.ClientCA, err = os.ReadFile(https.ClientCAFile); err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	if https.RequestHeaderClientCAFile != "" {
		if c.RequestHeaderCA, err = os.ReadFile(https.RequestHeaderClientCAFile); err != nil {
			return nil, fmt.Errorf("--requestheader-client-ca-file: %w", err)
		}
		c.AllowedNames = https.RequestHeaderAllowedNames
	}
	return authtrust.New(env, c)
}

// podListeners serves the front door at addr's port on the machine's pod
// network gateways too; addr itself is the endpoint while there is none.
func podListeners(env stage.Env, addr string) (*apiserver.PodListeners, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("api: --https-addr %q must be IP:port: %w", addr, err)
	}
	return &apiserver.PodListeners{Store: env.Store, Port: int(ap.Port()), Fallback: ap, Log: env.Log}, nil
}

// APIConfig is the api stage's configuration of o.
func APIConfig(o StageOptions) (api.Config, error) {
	cfg := api.DefaultConfig()
	if o.ServiceCIDR != "" {
		cfg.Services.CIDR = o.ServiceCIDR
	}
	cfg.TokenFile = o.TokenFile
	if o.ServiceAccountKeyFile != "" {
		tokens, err := auth.LoadBoundTokens(o.ServiceAccountKeyFile)
		if err != nil {
			return api.Config{}, fmt.Errorf("api: %w", err)
		}
		cfg.Authn.BoundTokens = tokens
	}
	if o.SealKeyFile != "" {
		key, err := sealed.LoadOrCreate(o.SealKeyFile)
		if err != nil {
			return api.Config{}, fmt.Errorf("api: seal key: %w", err)
		}
		cfg.SealKey = key
	}
	if o.EventsHighWater > 0 {
		cfg.EventsHighWater = o.EventsHighWater
	}
	switch {
	case o.UserPodQPS > 0:
		cfg.UserPodQPS = o.UserPodQPS
	case o.UserPodQPS < 0:
		cfg.UserPodQPS = 0 // no limit
	}
	if o.UserPodBurst > 0 {
		cfg.UserPodBurst = o.UserPodBurst
	}
	return cfg, nil
}

// StageOptions configure one stage replica (`podflow stage NAME`).
type StageOptions struct {
	Config  string // client configuration (see client.LoadConfig)
	Replica string // replica name (default NAME-HOST-PID)
	// TokenFile (api) is the static token file, kube-apiserver's
	// --token-auth-file format.
	TokenFile string
	// SealKeyFile (api) is the key pair bearer tokens on the bus are
	// sealed to (services/sealed; created if missing).
	SealKeyFile string
	// ServiceAccountKeyFile (api) signs bound ServiceAccount tokens (the
	// TokenRequest API; created if missing). Empty: no TokenRequest.
	ServiceAccountKeyFile string
	// HTTPS (api), if set, serves the Kubernetes API over HTTPS.
	HTTPS *apiserver.Config
	// EventsHighWater (api, 0: default 0.9) is the fraction of
	// PODFLOW_EVENTS' MaxBytes past which new pods are refused;
	// UserPodQPS (0: default 100; negative: no limit) and UserPodBurst
	// (0: default 200) each user's pod creation rate.
	EventsHighWater float64
	UserPodQPS      float64
	UserPodBurst    int
	// ServiceCIDR (api) is the service CIDR ClusterIPs are allocated
	// from, kube-apiserver's --service-cluster-ip-range ("": 10.96.0.0/16).
	ServiceCIDR string
	// RootCAFile (rootcacert) is the PEM CA bundle published as
	// kube-root-ca.crt (kube-controller-manager's --root-ca-file).
	RootCAFile string
	// PodSecurityDefault (admission) is the Pod Security level of
	// namespaces without the enforce label.
	PodSecurityDefault string
	NodeGrace          time.Duration // status: NotReady after this long without heartbeats (0: default)
	EventTTL           time.Duration // status: Events older than this are deleted (0: default)
	Resync             time.Duration // period of reconciliation from the store
	Provision          bool          // declare the streams and consumers before starting
	Metrics            string        // serve Prometheus /metrics on this address ("" for none)
}

// Stage runs one replica of the stage name until ctx is done.
func Stage(ctx context.Context, name string, o StageOptions) error {
	build, ok := stageBuilders[name]
	if !ok {
		return fmt.Errorf("unknown stage %q (stages: %s)", name, strings.Join(pipeline.Stages, ", "))
	}
	replica := o.Replica
	if replica == "" {
		host, _ := os.Hostname()
		replica = fmt.Sprintf("%s-%s-%d", name, host, os.Getpid())
	}
	sess, err := client.Open(ctx, o.Config, replica)
	if err != nil {
		return err
	}
	defer sess.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("stage", name, "replica", replica)
	env := stage.NewEnv(sess.Bus, sess.Store, name, replica, log)
	h, err := build(env, o)
	if err != nil {
		return err
	}
	rc, err := pipeline.RunnerConfig(name, replica)
	if err != nil {
		return err
	}
	if o.Provision {
		if err := Provision(ctx, sess.Bus, bus.DefaultStreamsConfig()); err != nil {
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
	err = stage.Run(ctx, sess.Bus, env, h, stage.Config{Runner: rc, NoConsumer: pipeline.Controller(name), ResyncPeriod: o.Resync, MetricsAddr: o.Metrics, Metrics: metrics, Tracing: tracing,
		OnMetrics: func(addr string) { log.Info("serving metrics", "addr", "http://"+addr+"/metrics") }})
	log.Info("stage stopped", "err", err)
	return err
}

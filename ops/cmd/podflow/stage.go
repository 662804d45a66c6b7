package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/services/admission"
	"github.com/podflow/podflow/services/api"
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
	resync     time.Duration
	provision  bool
	metrics    string
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
			cfg, err := loadConfig(o.config)
			if err != nil {
				return err
			}
			replica := o.replica
			if replica == "" {
				host, _ := os.Hostname()
				replica = fmt.Sprintf("%s-%s-%d", name, host, os.Getpid())
			}
			ctx := cmd.Context()
			sess, err := connect(ctx, cfg, replica)
			if err != nil {
				return err
			}
			defer sess.Close()
			log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("stage", name, "replica", replica)
			env := stage.Env{Bus: sess.bus, Store: sess.store, Stage: name, Replica: replica, Log: log}
			h, err := build(env, o)
			if err != nil {
				return err
			}
			rc, err := pipeline.RunnerConfig(name, replica)
			if err != nil {
				return err
			}
			if o.provision {
				if err := provision(ctx, sess.bus, bus.DefaultStreamsConfig()); err != nil {
					return err
				}
			}
			log.Info("stage started")
			err = stage.Run(ctx, env, h, stage.Config{Runner: rc, ResyncPeriod: o.resync, MetricsAddr: o.metrics,
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
	f.BoolVar(&o.provision, "provision", false, "declare the single-server streams and consumers before starting (`podflow up` does it for its stages)")
	f.StringVar(&o.metrics, "metrics-addr", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9100)")
	f.DurationVar(&o.resync, "resync", 10*time.Second, "period of reconciliation from the store")
	return cmd
}

func init() {
	stageBuilders[pipeline.Scheduler] = func(env stage.Env, o *stageOptions) (stage.Handler, error) {
		return scheduler.NewStage(env, scheduler.DefaultStageConfig())
	}
}

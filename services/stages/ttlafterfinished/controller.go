package ttlafterfinished

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"
	batch "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/controller"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// Config configures the controller.
type Config struct {
	// Controller configures the replica's Runner (work queue, Leases).
	Controller controller.Config
}

// DefaultConfig returns the defaults for a replica of the stage.
func DefaultConfig(replica string) Config {
	return Config{Controller: controller.DefaultConfig(pipeline.TTLAfterFinished, replica)}
}

// Validate checks the Config.
func (c Config) Validate() error { return c.Controller.Validate() }

// Controller is one replica of the TTL-after-finished controller stage.
type Controller struct {
	env    stage.Env
	cfg    Config
	runner *controller.Runner
	jobs   *informer.Informer[*corev1.Unstructured]
	log    *slog.Logger
}

var (
	_ stage.Handler    = (*Controller)(nil)
	_ stage.Starter    = (*Controller)(nil)
	_ stage.Reconciler = (*Controller)(nil)
)

// New returns a replica of the controller acting with env's identity.
func New(env stage.Env, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Controller.Log == nil {
		cfg.Controller.Log = log
	}
	c := &Controller{env: env, cfg: cfg, log: log}
	var err error
	if c.runner, err = controller.New(env.Store, cfg.Controller, c.sync, c.keys); err != nil {
		return nil, err
	}
	add := func(u *corev1.Unstructured) { c.runner.Add(keyOf(u)) }
	if c.jobs, err = informer.NewKind(env.Store, objects.Jobs, "", informer.Handlers[*corev1.Unstructured]{
		OnAdd:    add,
		OnUpdate: func(_, u *corev1.Unstructured) { add(u) },
		OnDelete: func(u *corev1.Unstructured) { c.runner.Forget(keyOf(u)) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func keyOf(u *corev1.Unstructured) string {
	return controller.Key(u.GetMetadata().GetNamespace(), u.GetMetadata().GetName())
}

// Handle is never called: the stage consumes no events.
func (c *Controller) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("ttlafterfinished: the controller consumes no events"))
}

// Start runs the informer, the Lease and the workers on g; it returns
// once the informer is synced.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(c.jobs)
	return c.runner.Start(ctx, g, &infs)
}

// Reconcile queues every Job.
func (c *Controller) Reconcile(ctx context.Context) error { return c.runner.Reconcile(ctx) }

// Runner is the replica's Runner (tests read its Members).
func (c *Controller) Runner() *controller.Runner { return c.runner }

func (c *Controller) keys() []string {
	var out []string
	for _, u := range c.jobs.List("") {
		out = append(out, keyOf(u))
	}
	return out
}

func (c *Controller) now() time.Time {
	if c.cfg.Controller.Now != nil {
		return c.cfg.Controller.Now()
	}
	return time.Now()
}

// sync is kube's processJob.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := controller.SplitKey(key)
	if err != nil {
		return nil
	}
	u, ok := c.jobs.Get(ns, name)
	if !ok {
		return nil
	}
	job, err := toJob(u)
	if err != nil {
		c.log.Warn("undecodable Job", "key", key, "err", err)
		return nil
	}
	if expired, err := c.processTTL(key, job); err != nil || expired == nil {
		return err
	}
	// The TTL ran out in the informer's copy: read it fresh and check
	// again, the TTL may have been changed.
	o, err := c.env.Store.GetKind(ctx, objects.Jobs, ns, name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	fresh, err := toJob(o)
	if err != nil {
		return nil
	}
	if fresh.UID != job.UID {
		return nil // another Job of the name: its own events queue it
	}
	if expired, err := c.processTTL(key, fresh); err != nil || expired == nil {
		return err
	}
	c.log.Info("cleaning up Job", "job", key, "uid", fresh.UID)
	// Foreground, as kube's controller deletes: the Job stays, marked,
	// until the garbage collector deleted its pods.
	foreground := string(metav1.DeletePropagationForeground)
	if _, _, err := stage.DeleteObjectWith(ctx, c.env.Store, objects.Jobs, o, &stage.DeleteOptions{PropagationPolicy: &foreground}); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
		return fmt.Errorf("delete Job %s: %w", key, err)
	}
	return nil
}

// processTTL returns when job's TTL ran out, or nil after queueing it
// for when it will (kube's processTTL).
func (c *Controller) processTTL(key string, job *batch.Job) (*time.Time, error) {
	if job.DeletionTimestamp != nil || !needsCleanup(job) {
		return nil, nil
	}
	now := c.now()
	left, expireAt, err := timeLeft(job, now)
	if err != nil {
		return nil, err
	}
	if left <= 0 {
		return &expireAt, nil
	}
	c.runner.AddAfter(key, left)
	return nil, nil
}

func toJob(o objects.Object) (*batch.Job, error) {
	k, err := manifest.ToKube(o)
	if err != nil {
		return nil, err
	}
	j, ok := k.(*batch.Job)
	if !ok {
		return nil, fmt.Errorf("a stored Job is a %T", k)
	}
	return j, nil
}

// needsCleanup is kube's: a finished Job with a TTL.
func needsCleanup(j *batch.Job) bool {
	return j.Spec.TTLSecondsAfterFinished != nil && finished(j)
}

// finished is kube's IsJobFinished: Complete or Failed True.
func finished(j *batch.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batch.JobComplete || c.Type == batch.JobFailed) && c.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

// timeLeft is how long until job's TTL runs out at now, and when (kube's
// timeLeft over getFinishAndExpireTime).
func timeLeft(j *batch.Job, now time.Time) (time.Duration, time.Time, error) {
	finishAt, err := jobFinishTime(j)
	if err != nil {
		return 0, time.Time{}, err
	}
	expireAt := finishAt.Add(time.Duration(*j.Spec.TTLSecondsAfterFinished) * time.Second)
	return expireAt.Sub(now), expireAt, nil
}

// jobFinishTime is kube's: the lastTransitionTime of the condition that
// finished the Job.
func jobFinishTime(j *batch.Job) (time.Time, error) {
	for _, c := range j.Status.Conditions {
		if (c.Type == batch.JobComplete || c.Type == batch.JobFailed) && c.Status == v1.ConditionTrue {
			if c.LastTransitionTime.IsZero() {
				return time.Time{}, fmt.Errorf("unable to find the time when the Job %s/%s finished", j.Namespace, j.Name)
			}
			return c.LastTransitionTime.Time, nil
		}
	}
	return time.Time{}, fmt.Errorf("unable to find the status of the finished Job %s/%s", j.Namespace, j.Name)
}

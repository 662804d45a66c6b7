package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/podflow/podflow/services/workqueue"
)

// Config configures a controller stage replica's Runner.
type Config struct {
	// Stage and Replica name the controller stage and this replica (the
	// stage's Env gives them).
	Stage, Replica string
	// Queue configures the work queue: retries of failed syncs and
	// Workers, how many distinct keys sync at once (default 8).
	Queue workqueue.Config
	// LeaseNamespace holds the replicas' Leases (default kube-system).
	LeaseNamespace string
	// LeaseDuration: a replica whose Lease was not renewed for this long
	// is dead and its keys move (default 8s). RenewInterval is how often a
	// replica renews its own (default 2s); RenewDeadline how long it may
	// fail to before it stops syncing (default 6s, less than
	// LeaseDuration so that it stops before the others take over).
	LeaseDuration, RenewInterval, RenewDeadline time.Duration
	// Settle is how long a key that moved from a live replica (one joined)
	// waits before its new owner syncs it, time for the previous owner to
	// see the change and finish the sync it is in (default 4s).
	Settle time.Duration
	// MaxClockSkew bounds the clocks' difference between hosts: a Lease
	// whose renewTime is older than its duration and this is dead even
	// when we saw it only now (default 2s).
	MaxClockSkew time.Duration
	// ExpiredLeaseAge: Leases dead for this long are deleted (default 1m).
	ExpiredLeaseAge time.Duration
	// PodsIdle: a controller whose pod informer runs only while it has
	// objects of its own kind (Runner.LazyPods) stops it, and drops its
	// cache, once it has had none for this long (default 1m; 0 keeps the
	// informer once started).
	PodsIdle time.Duration
	// Log receives failures (nil: discarded).
	Log *slog.Logger
	// Now is the clock (nil: time.Now); tests move it.
	Now func() time.Time
}

// DefaultConfig returns the defaults documented on Config for a replica
// of stage.
func DefaultConfig(stage, replica string) Config {
	q := workqueue.DefaultConfig()
	q.Workers = 8
	return Config{Stage: stage, Replica: replica, Queue: q, LeaseNamespace: "kube-system",
		LeaseDuration: 8 * time.Second, RenewInterval: 2 * time.Second, RenewDeadline: 6 * time.Second,
		Settle: 4 * time.Second, MaxClockSkew: 2 * time.Second, ExpiredLeaseAge: time.Minute,
		PodsIdle: time.Minute}
}

// FastConfig shortens every period of cfg for tests: a dead replica's
// keys move within a second.
func FastConfig(cfg *Config) {
	cfg.LeaseDuration, cfg.RenewInterval, cfg.RenewDeadline = time.Second, 200*time.Millisecond, 800*time.Millisecond
	cfg.Settle, cfg.MaxClockSkew, cfg.ExpiredLeaseAge = 500*time.Millisecond, 200*time.Millisecond, 10*time.Second
	cfg.Queue.RetryMin, cfg.Queue.RetryMax = 10*time.Millisecond, time.Second
}

// Validate checks the Config.
func (c Config) Validate() error {
	switch {
	case c.Stage == "" || c.Replica == "":
		return errors.New("controller: Stage and Replica are required")
	case c.LeaseNamespace == "":
		return errors.New("controller: LeaseNamespace is required")
	case c.RenewInterval <= 0 || c.RenewDeadline <= c.RenewInterval:
		return fmt.Errorf("controller: RenewDeadline (%s) must be longer than RenewInterval (%s), which must be positive", c.RenewDeadline, c.RenewInterval)
	case c.LeaseDuration <= c.RenewDeadline:
		return fmt.Errorf("controller: LeaseDuration (%s) must be longer than RenewDeadline (%s)", c.LeaseDuration, c.RenewDeadline)
	case c.PodsIdle < 0:
		return fmt.Errorf("controller: PodsIdle (%s) cannot be negative", c.PodsIdle)
	case c.Settle < 0 || c.MaxClockSkew < 0:
		return fmt.Errorf("controller: Settle (%s) and MaxClockSkew (%s) cannot be negative", c.Settle, c.MaxClockSkew)
	case c.ExpiredLeaseAge < c.LeaseDuration:
		return fmt.Errorf("controller: ExpiredLeaseAge (%s) cannot be shorter than LeaseDuration (%s)", c.ExpiredLeaseAge, c.LeaseDuration)
	}
	return c.Queue.Validate()
}

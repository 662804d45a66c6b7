package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// SystemNamespaces are the namespaces every cluster has.
var SystemNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// LabelMetadataName is the label every namespace carries with its name.
const LabelMetadataName = "kubernetes.io/metadata.name"

// Config configures a Controller.
type Config struct {
	// Namespaces are kept existing (default SystemNamespaces).
	Namespaces []string
	// Interval between passes (default 1m, kube's system namespaces
	// controller's).
	Interval time.Duration
	// RetryMin and RetryMax bound the backoff of a failed first pass
	// (default 100ms, 5s).
	RetryMin, RetryMax time.Duration
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{Namespaces: SystemNamespaces, Interval: time.Minute, RetryMin: 100 * time.Millisecond, RetryMax: 5 * time.Second}
}

// Validate checks the Config.
func (c Config) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("bootstrap: Interval (%s) must be positive", c.Interval)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("bootstrap: RetryMin (%s) must be positive and at most RetryMax (%s)", c.RetryMin, c.RetryMax)
	}
	return nil
}

// Controller keeps the system namespaces and the bootstrap RBAC policy.
type Controller struct {
	env stage.Env
	cfg Config
	now func() time.Time
}

var _ stage.Starter = (*Controller)(nil)

// New returns a Controller over env's store.
func New(env stage.Env, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Controller{env: env, cfg: cfg, now: time.Now}, nil
}

// Start makes a first pass, retried with backoff until it succeeds or ctx
// ends, then passes again every Interval on g.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	for wait := c.cfg.RetryMin; ; wait = min(2*wait, c.cfg.RetryMax) {
		err := c.Pass(ctx)
		if err == nil {
			break
		}
		if c.env.Log != nil {
			c.env.Log.Warn("bootstrap pass failed; retrying", "in", wait, "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	g.Go(func() error {
		t := time.NewTicker(c.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				if err := c.Pass(ctx); err != nil && ctx.Err() == nil && c.env.Log != nil {
					c.env.Log.Warn("bootstrap pass failed", "err", err)
				}
			}
		}
	})
	return nil
}

// Pass makes every system namespace and bootstrap RBAC object exist as
// the policy says, once.
func (c *Controller) Pass(ctx context.Context) error {
	var errs []error
	for _, ns := range c.cfg.Namespaces {
		if err := c.ensureNamespace(ctx, ns); err != nil {
			errs = append(errs, fmt.Errorf("namespace %q: %w", ns, err))
		}
	}
	roles, bindings := auth.BootstrapPolicy()
	for _, r := range roles {
		if err := c.ensureClusterRole(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("clusterrole %q: %w", r.GetMetadata().GetName(), err))
		}
	}
	for _, b := range bindings {
		if err := c.ensureClusterRoleBinding(ctx, b); err != nil {
			errs = append(errs, fmt.Errorf("clusterrolebinding %q: %w", b.GetMetadata().GetName(), err))
		}
	}
	for _, r := range auth.BootstrapNamespaceRoles() {
		if err := c.ensureRole(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("role %s/%s: %w", r.GetMetadata().GetNamespace(), r.GetMetadata().GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// stamp gives a new object what the api stage gives one it creates.
func (c *Controller) stamp(md *corev1.ObjectMeta) {
	md.Uid, md.CreationTimestamp = uuid.NewString(), timestamppb.New(c.now())
}

// create stores obj unless it exists: another replica's create is as
// good.
func (c *Controller) create(ctx context.Context, obj objects.Object) error {
	c.stamp(objects.Meta(obj))
	_, err := c.env.Store.Create(ctx, obj)
	if errors.Is(err, raftstore.ErrAlreadyExists) {
		return nil
	}
	if err == nil && c.env.Log != nil {
		md := obj.GetMetadata()
		c.env.Log.Info("bootstrap: created", "kind", fmt.Sprintf("%T", obj), "namespace", md.GetNamespace(), "name", md.GetName())
	}
	return err
}

// ensureNamespace creates the namespace name as kube-apiserver creates a
// namespace, when it does not exist. One being deleted is left to finish
// (the next pass creates it again).
func (c *Controller) ensureNamespace(ctx context.Context, name string) error {
	_, err := objects.Get[*corev1.Namespace](ctx, c.env.Store, "", name)
	if !errors.Is(err, raftstore.ErrNotFound) {
		return err
	}
	ns := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: name, Labels: map[string]string{LabelMetadataName: name}}}
	nslifecycle.PrepareForCreate(ns)
	return c.create(ctx, ns)
}

// autoupdate reports whether a bootstrap object may be reconciled.
func autoupdate(md *corev1.ObjectMeta) bool {
	return md.GetAnnotations()[auth.AnnotationAutoupdate] != "false"
}

// mergeMeta adds want's labels and annotations that md lacks (md's own
// values win); it reports whether md changed.
func mergeMeta(md, want *corev1.ObjectMeta) bool {
	changed := false
	add := func(dst *map[string]string, src map[string]string) {
		for k, v := range src {
			if _, ok := (*dst)[k]; ok {
				continue
			}
			if *dst == nil {
				*dst = map[string]string{}
			}
			(*dst)[k], changed = v, true
		}
	}
	add(&md.Labels, want.GetLabels())
	add(&md.Annotations, want.GetAnnotations())
	return changed
}

// ensureClusterRole creates want, or adds to the stored role the rules
// (and labels, annotations) want has that it does not cover.
func (c *Controller) ensureClusterRole(ctx context.Context, want *corev1.ClusterRole) error {
	name := want.GetMetadata().GetName()
	cur, err := objects.Get[*corev1.ClusterRole](ctx, c.env.Store, "", name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return c.create(ctx, want)
	}
	if err != nil || !autoupdate(cur.GetMetadata()) {
		return err
	}
	next := proto.CloneOf(cur)
	changed := mergeMeta(next.Metadata, want.GetMetadata())
	if covered, missing := auth.Covers(cur.GetRules(), want.GetRules()); !covered {
		next.Rules, changed = append(next.Rules, missing...), true
	}
	if !changed {
		return nil
	}
	_, err = c.env.Store.Update(ctx, next)
	return err
}

// ensureRole is ensureClusterRole for a namespaced Role.
func (c *Controller) ensureRole(ctx context.Context, want *corev1.Role) error {
	md := want.GetMetadata()
	cur, err := objects.Get[*corev1.Role](ctx, c.env.Store, md.GetNamespace(), md.GetName())
	if errors.Is(err, raftstore.ErrNotFound) {
		return c.create(ctx, want)
	}
	if err != nil || !autoupdate(cur.GetMetadata()) {
		return err
	}
	next := proto.CloneOf(cur)
	changed := mergeMeta(next.Metadata, md)
	if covered, missing := auth.Covers(cur.GetRules(), want.GetRules()); !covered {
		next.Rules, changed = append(next.Rules, missing...), true
	}
	if !changed {
		return nil
	}
	_, err = c.env.Store.Update(ctx, next)
	return err
}

// ensureClusterRoleBinding creates want, adds the subjects (and labels,
// annotations) it lacks to the stored binding, or re-creates a binding
// whose roleRef is not want's.
func (c *Controller) ensureClusterRoleBinding(ctx context.Context, want *corev1.ClusterRoleBinding) error {
	name := want.GetMetadata().GetName()
	cur, err := objects.Get[*corev1.ClusterRoleBinding](ctx, c.env.Store, "", name)
	if errors.Is(err, raftstore.ErrNotFound) {
		return c.create(ctx, want)
	}
	if err != nil || !autoupdate(cur.GetMetadata()) {
		return err
	}
	if !proto.Equal(cur.GetRoleRef(), want.GetRoleRef()) {
		// The roleRef of a binding cannot change: delete and create again.
		if _, err := c.env.Store.Delete(ctx, objects.ClusterRoleBindings, "", name, objects.Revision(cur)); err != nil && !errors.Is(err, raftstore.ErrNotFound) {
			return err
		}
		return c.create(ctx, want)
	}
	next := proto.CloneOf(cur)
	changed := mergeMeta(next.Metadata, want.GetMetadata())
	for _, s := range want.GetSubjects() {
		if !slices.ContainsFunc(next.Subjects, func(x *corev1.Subject) bool { return proto.Equal(x, s) }) {
			next.Subjects, changed = append(next.Subjects, s), true
		}
	}
	if !changed {
		return nil
	}
	_, err = c.env.Store.Update(ctx, next)
	return err
}

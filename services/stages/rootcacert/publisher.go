package rootcacert

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/workqueue"
)

// The ConfigMap's name, key and annotation, as Kubernetes'.
const (
	ConfigMapName         = "kube-root-ca.crt"
	CAKey                 = "ca.crt"
	DescriptionAnnotation = "kubernetes.io/description"
	Description           = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. " +
		"No other usage is guaranteed across distributions of Kubernetes clusters."
)

// Config configures a Publisher.
type Config struct {
	// RootCA is the PEM of the CA bundle to publish (kube-controller-
	// manager's --root-ca-file); required.
	RootCA []byte
	// Queue configures the retries of a namespace whose sync failed.
	Queue workqueue.Config
}

// DefaultConfig returns the defaults (RootCA is still to be set).
func DefaultConfig() Config { return Config{Queue: workqueue.DefaultConfig()} }

// Validate checks the Config: RootCA must hold at least one certificate.
func (c Config) Validate() error {
	rest, n := c.RootCA, 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("rootcacert: RootCA: %w", err)
		}
		n++
	}
	if n == 0 {
		return errors.New("rootcacert: RootCA holds no PEM certificate")
	}
	return c.Queue.Validate()
}

// Publisher keeps kube-root-ca.crt in every namespace.
type Publisher struct {
	env   stage.Env
	cfg   Config
	queue *workqueue.Queue
	nss   *informer.Informer[*corev1.Namespace]
	cms   *informer.Informer[*corev1.ConfigMap]
}

var (
	_ stage.Handler    = (*Publisher)(nil)
	_ stage.Starter    = (*Publisher)(nil)
	_ stage.Reconciler = (*Publisher)(nil)
)

// New returns a Publisher over env's store.
func New(env stage.Env, cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Queue.Log == nil {
		cfg.Queue.Log = env.Log
	}
	p := &Publisher{env: env, cfg: cfg, queue: workqueue.New(cfg.Queue)}
	var err error
	if p.nss, err = informer.New[*corev1.Namespace](env.Store, "", informer.Handlers[*corev1.Namespace]{
		OnAdd:    func(ns *corev1.Namespace) { p.queue.Add(ns.GetMetadata().GetName()) },
		OnUpdate: func(_, ns *corev1.Namespace) { p.queue.Add(ns.GetMetadata().GetName()) },
	}); err != nil {
		return nil, err
	}
	ours := func(cm *corev1.ConfigMap) {
		if cm.GetMetadata().GetName() == ConfigMapName {
			p.queue.Add(cm.GetMetadata().GetNamespace())
		}
	}
	if p.cms, err = informer.New[*corev1.ConfigMap](env.Store, "", informer.Handlers[*corev1.ConfigMap]{
		OnUpdate: func(_, cm *corev1.ConfigMap) { ours(cm) },
		OnDelete: ours,
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// Handle is never called: the stage consumes no events.
func (p *Publisher) Handle(context.Context, *bus.Delivery) error {
	return bus.Permanent(errors.New("rootcacert: the publisher consumes no events"))
}

// Start runs the informers and the worker on g; it returns once the
// informers are synced.
func (p *Publisher) Start(ctx context.Context, g *errgroup.Group) error {
	var infs informer.Group
	infs.Add(p.nss, p.cms)
	if err := infs.Start(ctx, g); err != nil {
		return err
	}
	g.Go(func() error { return p.queue.Run(ctx, p.Sync) })
	return nil
}

// Reconcile queues every namespace.
func (p *Publisher) Reconcile(context.Context) error {
	for _, ns := range p.nss.List("") {
		p.queue.Add(ns.GetMetadata().GetName())
	}
	return nil
}

// Sync makes the namespace name's kube-root-ca.crt what it should be, as
// kube's syncNamespace: created when missing, its data and description
// put back when they differ. A namespace being terminated gets nothing.
func (p *Publisher) Sync(ctx context.Context, name string) error {
	ns, ok := p.nss.Get("", name)
	if !ok || nslifecycle.Terminating(ns) {
		return nil
	}
	want := map[string]string{CAKey: string(p.cfg.RootCA)}
	cm, ok := p.cms.Get(name, ConfigMapName)
	if !ok {
		obj := &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: ConfigMapName, Namespace: name, Uid: uuid.NewString(),
			CreationTimestamp: timestamppb.Now(), Annotations: map[string]string{DescriptionAnnotation: Description}}, Data: want}
		created, err := nslifecycle.CreateIn(ctx, p.env.Store, ns, obj)
		if err != nil {
			return fmt.Errorf("create configmap %s/%s: %w", name, ConfigMapName, err)
		}
		if created && p.env.Log != nil {
			p.env.Log.Info("published the root CA", "namespace", name)
		}
		return nil
	}
	if maps.Equal(cm.GetData(), want) && cm.GetMetadata().GetAnnotations()[DescriptionAnnotation] != "" {
		return nil
	}
	fixed := proto.CloneOf(cm) // the informer's copy is shared
	fixed.Data = want
	if fixed.Metadata.Annotations == nil {
		fixed.Metadata.Annotations = map[string]string{}
	}
	fixed.Metadata.Annotations[DescriptionAnnotation] = Description
	_, err := p.env.Store.Update(ctx, fixed)
	if errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrNotFound) {
		return err // changed or deleted since: the informer brings it back here
	}
	if err == nil && p.env.Log != nil {
		p.env.Log.Info("repaired the root CA configmap", "namespace", name)
	}
	return err
}

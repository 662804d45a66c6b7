package kubernetesservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// The Service's and its slice's names and labels, as kube-apiserver's.
const (
	Namespace   = "default"
	ServiceName = "kubernetes"
	PortName    = "https"
	// LeasePrefix holds one store key per live api replica address
	// (LeasePrefix + IP), kube-apiserver's /masterleases/.
	LeasePrefix = pipeline.MasterLeasePrefix
)

// ServiceLabels are the labels kube-apiserver gives the Service.
var ServiceLabels = map[string]string{"provider": "kubernetes", "component": "apiserver"}

// Config configures a Controller.
type Config struct {
	// ServiceIPs is the service CIDR's allocator; the Service gets its
	// first address. Required.
	ServiceIPs *ipalloc.Allocator
	// Endpoint returns the address (IP and port) pods reach this replica
	// at; ok false while it has none (no lease is renewed then). Required.
	Endpoint func() (netip.AddrPort, bool)
	// ServicePort is the Service's port (default 443).
	ServicePort int32
	// LeaseTTL is how long a lease lives unless renewed (default 15s,
	// kube's --endpoint-reconciler lease TTL); Interval how often the
	// lease is renewed and the slice reconciled (default 10s).
	LeaseTTL, Interval time.Duration
}

// DefaultConfig returns the defaults (ServiceIPs and Endpoint are still
// to be set).
func DefaultConfig() Config {
	return Config{ServicePort: 443, LeaseTTL: 15 * time.Second, Interval: 10 * time.Second}
}

// Validate checks the Config.
func (c Config) Validate() error {
	switch {
	case c.ServiceIPs == nil || c.Endpoint == nil:
		return errors.New("kubernetesservice: ServiceIPs and Endpoint are required")
	case c.ServicePort <= 0 || c.ServicePort > 65535:
		return fmt.Errorf("kubernetesservice: ServicePort %d is not a port", c.ServicePort)
	case c.Interval <= 0 || c.LeaseTTL <= c.Interval:
		return fmt.Errorf("kubernetesservice: Interval (%s) must be positive and below LeaseTTL (%s)", c.Interval, c.LeaseTTL)
	}
	return nil
}

// Controller keeps default/kubernetes and its EndpointSlice.
type Controller struct {
	env stage.Env
	cfg Config
	now func() time.Time
	// last is the endpoint this replica renewed a lease for last (only
	// Pass's goroutine uses it): when the endpoint changes, the old
	// lease is given up at once.
	last netip.AddrPort
}

// A Starter, not a Reconciler: Start runs Pass on its own ticker, one at
// a time.
var _ stage.Starter = (*Controller)(nil)

// New returns a Controller over env's store.
func New(env stage.Env, cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Controller{env: env, cfg: cfg, now: time.Now}, nil
}

// endpointCheck is how often the replica's endpoint is looked at between
// passes: when it changes (the node's bridge came up) a pass runs at once,
// so pods reach the API within a second of their node, not an Interval.
const endpointCheck = time.Second

// Start reconciles now, every Interval and whenever the replica's endpoint
// changes, on g until ctx ends, then removes this replica's lease.
func (c *Controller) Start(ctx context.Context, g *errgroup.Group) error {
	g.Go(func() error {
		t := time.NewTicker(min(endpointCheck, c.cfg.Interval))
		defer t.Stop()
		var last time.Time
		var tried netip.AddrPort // the endpoint of the last pass
		for {
			if ep, _ := c.cfg.Endpoint(); ep != tried || time.Since(last) >= c.cfg.Interval {
				tried, last = ep, time.Now()
				if err := c.Pass(ctx); err != nil && ctx.Err() == nil && c.env.Log != nil {
					c.env.Log.Warn("kubernetes service: reconcile failed", "err", err)
				}
			}
			select {
			case <-ctx.Done():
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
				defer cancel()
				c.stop(sctx)
				return nil
			case <-t.C:
			}
		}
	})
	return nil
}

// stop removes this replica's lease and takes its address out of the
// slice (best effort: the lease expires anyway).
func (c *Controller) stop(ctx context.Context) {
	ep, ok := c.cfg.Endpoint()
	if !ok {
		return
	}
	c.release(ctx, ep.Addr())
	_ = c.reconcileSlice(ctx, ep.Port())
}

// release deletes the lease of addr if this replica renewed it last.
func (c *Controller) release(ctx context.Context, addr netip.Addr) {
	key := LeasePrefix + addr.String()
	if kv, err := c.env.Store.KV().Get(ctx, key); err == nil {
		var l lease
		if json.Unmarshal(kv.Value, &l) == nil && l.Holder == c.env.Replica {
			_, _ = c.env.Store.KV().Delete(ctx, key, kv.ModRevision)
		}
	}
}

// lease is a lease key's value.
type lease struct {
	Port    uint16    `json:"port"`
	Expires time.Time `json:"expires"`
	Holder  string    `json:"holder"` // the replica that renewed it last
}

// Pass makes one pass: the Service, the default ServiceCIDR, this
// replica's lease, the slice
// (not a stage.Reconciler: Start runs it on its own ticker, once at a
// time).
func (c *Controller) Pass(ctx context.Context) error {
	if err := c.ensureService(ctx); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if err := c.ensureServiceCIDR(ctx); err != nil {
		return fmt.Errorf("default ServiceCIDR: %w", err)
	}
	ep, ok := c.cfg.Endpoint()
	if !ok {
		return nil
	}
	if c.last.IsValid() && c.last.Addr() != ep.Addr() {
		c.release(ctx, c.last.Addr()) // moved (the node's bridge came up): the old address goes at once
	}
	c.last = ep
	b, _ := json.Marshal(lease{Port: ep.Port(), Expires: c.now().Add(c.cfg.LeaseTTL).UTC(), Holder: c.env.Replica})
	put := raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: LeasePrefix + ep.Addr().String(), Value: b}}}
	if _, err := c.env.Store.KV().Txn(ctx, put); err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	return c.reconcileSlice(ctx, ep.Port())
}

// ensureService creates the Service with the first IP of the service CIDR
// when it is missing (kube's CreateOrUpdateMasterServiceIfNeeded: an
// existing one is left alone).
func (c *Controller) ensureService(ctx context.Context) error {
	_, err := objects.Get[*corev1.Service](ctx, c.env.Store, Namespace, ServiceName)
	if !errors.Is(err, raftstore.ErrNotFound) {
		return err
	}
	ep, ok := c.cfg.Endpoint()
	target := int32(443)
	if ok {
		target = int32(ep.Port())
	}
	ip := c.cfg.ServiceIPs.CIDR().Addr().Next().String()
	svc := &corev1.Service{
		Metadata: &corev1.ObjectMeta{Name: ServiceName, Namespace: Namespace, Labels: maps(ServiceLabels),
			Uid: uuid.NewString(), CreationTimestamp: timestamppb.New(c.now())},
		Spec: &corev1.ServiceSpec{
			Ports: []*corev1.ServicePort{{Name: PortName, Protocol: "TCP", Port: c.cfg.ServicePort,
				TargetPort: &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: target}}}},
			ClusterIp: ip, ClusterIps: []string{ip}, Type: "ClusterIP", SessionAffinity: "None",
		},
		Status: &corev1.ServiceStatus{},
	}
	_, err = c.cfg.ServiceIPs.Create(ctx, c.env.Store, svc)
	var se *raftstore.Error
	if errors.As(err, &se) && errors.Is(err, raftstore.ErrConflict) && strings.HasPrefix(se.Key, objects.Services.Prefix("")) {
		return nil // another replica created it
	}
	if err == nil && c.env.Log != nil {
		c.env.Log.Info("created the kubernetes service", "clusterIP", ip)
	}
	return err
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// liveAddrs lists the leases, deleting expired ones, and returns the live
// addresses, sorted.
func (c *Controller) liveAddrs(ctx context.Context) ([]string, error) {
	kvs, _, err := c.env.Store.KV().List(ctx, LeasePrefix)
	if err != nil {
		return nil, err
	}
	now := c.now()
	var out []string
	for _, kv := range kvs {
		var l lease
		if err := json.Unmarshal(kv.Value, &l); err != nil || !now.Before(l.Expires) {
			// Expired (or not a lease): gone, unless renewed meanwhile.
			_, _ = c.env.Store.KV().Delete(ctx, kv.Key, kv.ModRevision)
			continue
		}
		out = append(out, strings.TrimPrefix(kv.Key, LeasePrefix))
	}
	sort.Slice(out, func(i, j int) bool {
		a, aerr := netip.ParseAddr(out[i])
		b, berr := netip.ParseAddr(out[j])
		if aerr != nil || berr != nil {
			return out[i] < out[j]
		}
		return a.Less(b)
	})
	return out, nil
}

// desiredSlice is the slice listing addrs on port, as kube's
// endpointSliceFromEndpoints builds it.
func desiredSlice(addrs []string, port uint16) *corev1.EndpointSlice {
	sl := &corev1.EndpointSlice{
		Metadata:    &corev1.ObjectMeta{Name: ServiceName, Namespace: Namespace, Labels: map[string]string{"kubernetes.io/service-name": ServiceName}},
		AddressType: "IPv4",
		Ports:       []*corev1.EndpointPort{{Name: proto.String(PortName), Protocol: proto.String("TCP"), Port: proto.Int32(int32(port))}},
	}
	for _, a := range addrs {
		sl.Endpoints = append(sl.Endpoints, &corev1.Endpoint{Addresses: []string{a}, Conditions: &corev1.EndpointConditions{Ready: proto.Bool(true)}})
	}
	return sl
}

// reconcileSlice makes the slice list the live leases' addresses on port
// (created when missing, compare-and-swapped when it differs).
func (c *Controller) reconcileSlice(ctx context.Context, port uint16) error {
	addrs, err := c.liveAddrs(ctx)
	if err != nil {
		return err
	}
	cur, err := objects.Get[*corev1.EndpointSlice](ctx, c.env.Store, Namespace, ServiceName)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		cur = nil
	case err != nil:
		return err
	}
	if len(addrs) == 0 {
		return nil // never erase every endpoint (kube refuses to)
	}
	if err := c.reconcileEndpoints(ctx, addrs, port); err != nil { // core/v1, beside the slice (endpoints.go)
		return err
	}
	want := desiredSlice(addrs, port)
	if cur == nil {
		md := want.Metadata
		md.Uid, md.CreationTimestamp = uuid.NewString(), timestamppb.New(c.now())
		_, err := c.env.Store.Create(ctx, want)
		if errors.Is(err, raftstore.ErrAlreadyExists) {
			return nil // another replica's: the next pass compares
		}
		return err
	}
	if sameSlice(cur, want) {
		return nil
	}
	next := proto.CloneOf(cur)
	next.AddressType, next.Endpoints, next.Ports = want.AddressType, want.Endpoints, want.Ports
	if next.Metadata.Labels == nil {
		next.Metadata.Labels = map[string]string{}
	}
	for k, v := range want.Metadata.Labels {
		next.Metadata.Labels[k] = v
	}
	_, err = c.env.Store.Update(ctx, next)
	if errors.Is(err, raftstore.ErrConflict) {
		return nil // another replica's write: the next pass compares
	}
	return err
}

func sameSlice(cur, want *corev1.EndpointSlice) bool {
	if cur.GetAddressType() != want.GetAddressType() || len(cur.GetEndpoints()) != len(want.GetEndpoints()) ||
		len(cur.GetPorts()) != len(want.GetPorts()) {
		return false
	}
	for k, v := range want.GetMetadata().GetLabels() {
		if cur.GetMetadata().GetLabels()[k] != v {
			return false
		}
	}
	return slices.EqualFunc(cur.GetEndpoints(), want.GetEndpoints(), func(a, b *corev1.Endpoint) bool { return proto.Equal(a, b) }) &&
		slices.EqualFunc(cur.GetPorts(), want.GetPorts(), func(a, b *corev1.EndpointPort) bool { return proto.Equal(a, b) })
}

// Package nodewire connects a node agent to the rest of podflow: a Publisher
// over the bus, a NodeStore over the replicated store, and the bus handler
// that turns PodScheduled and PodDeleteRequested into HandlePodBound and
// HandlePodDelete, and a watch of the node's pods (PodWatch) that hands
// it the ephemeral containers kubectl debug adds.
//
// Callers must:
//
//  1. Provision the agent's consumer (pipeline.NodeAgentRunnerConfig(node),
//     or pipeline.SimNodesRunnerConfig for a sim.Cluster) before running it.
//  2. Run a bus.Runner with Handler(store, agent, time.Second) and cancel it
//     before stopping the agent.
//  3. Run a PodWatch (NewPodWatch(store, agent, node, log)) beside it, so
//     that ephemeral containers added to the node's pods (kubectl debug)
//     reach the agent at once; cancel it with the runner.
//
// Example:
//
//	st := objects.New(storeClient)
//	a, _ := nodeagent.New(cfg, rt, nodewire.NewStore(st), nodewire.NewPublisher(conn))
//	go a.Run(ctx)
//	r, _ := bus.NewRunner(conn, pipeline.NodeAgentRunnerConfig(cfg.NodeName), nodewire.Handler(st, a, time.Second))
//	err := r.Run(ctx)
package nodewire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/google/uuid"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/proto/apiv1"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Publisher publishes through a bus connection, waiting for the PubAck.
type Publisher struct{ conn *bus.Conn }

var _ nodeagent.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher over conn.
func NewPublisher(conn *bus.Conn) *Publisher { return &Publisher{conn: conn} }

// Publish implements nodeagent.Publisher. A duplicate (same id within the
// stream's window) is acknowledged and is not an error.
func (p *Publisher) Publish(ctx context.Context, env *eventsv1.Envelope) error {
	_, err := p.conn.Publish(ctx, env)
	return err
}

// Store is the agent's view of the replicated store (and, WithTokens,
// of the api stage's token requests).
type Store struct {
	s     *objects.Store
	nc    *nats.Conn   // token requests; nil: none
	cache *objectCache // the referenced ConfigMaps and Secrets; nil: none
	// leases are the node Leases last written, by node: the next renewal
	// updates that copy without reading it (see RenewNodeLease).
	leases *leaseCache
}

// leaseCache holds the node Leases last written by node, shared by every
// copy of a Store.
type leaseCache struct {
	mu     sync.Mutex
	m      map[string]*corev1.Unstructured
	maxRev int64 // the latest revision of them
}

// rev is the revision of node's Lease as last written ("" for the
// latest of all); 0 when none.
func (c *leaseCache) rev(node string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if node == "" {
		return c.maxRev
	}
	return objects.Revision(c.m[node])
}

// get returns node's Lease as last written, for the caller to update
// (nil when none): a copy with metadata of its own (a write sets its
// resourceVersion) and the cached content, which the caller replaces and
// never modifies. Every node renews its Lease at every heartbeat: a
// copy of the content, here and in set, was garbage at once.
func (c *leaseCache) get(node string) *corev1.Unstructured {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.m[node]
	if l == nil {
		return nil
	}
	out := &corev1.Unstructured{Metadata: l.Metadata.CloneVT(), ApiVersion: l.ApiVersion, Kind: l.Kind, Content: l.Content}
	out.ProtoReflect().SetUnknown(l.ProtoReflect().GetUnknown())
	return out
}

// set records lease as node's last written Lease, which the caller no
// longer modifies; nil forgets it.
func (c *leaseCache) set(node string, lease *corev1.Unstructured) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lease == nil {
		delete(c.m, node)
		return
	}
	c.m[node] = lease
	c.maxRev = max(c.maxRev, objects.Revision(lease))
}

var (
	_ nodeagent.NodeStore      = (*Store)(nil)
	_ nodeagent.TokenRequester = (*Store)(nil)
)

// NewStore returns a Store over s.
func NewStore(s *objects.Store) *Store {
	return &Store{s: s, leases: &leaseCache{m: map[string]*corev1.Unstructured{}}}
}

// WithTokens returns the Store asking the api stage for projected
// serviceAccountTokens over nc (the node agent's own connection: the bus
// lets it ask only for its node).
func (s *Store) WithTokens(nc *nats.Conn) *Store {
	return &Store{s: s.s, nc: nc, cache: s.cache, leases: s.leases}
}

var _ nodeagent.PodRegistrar = (*Store)(nil)

// WithObjectCache returns the Store keeping the ConfigMaps and Secrets its
// agents' pods reference in a watch-based cache until ctx ends, as
// kubelet's ConfigMap and Secret managers do (see objectCache): a pod's
// volumes and environment are then read from the cache, not the store.
// The agents register each pod (nodeagent.PodRegistrar).
func (s *Store) WithObjectCache(ctx context.Context) *Store {
	return &Store{s: s.s, nc: s.nc, cache: newObjectCache(ctx, s.s.KV()), leases: s.leases}
}

// RegisterPod implements nodeagent.PodRegistrar.
func (s *Store) RegisterPod(pod *corev1.Pod) {
	if s.cache != nil {
		s.cache.register(pod)
	}
}

// UnregisterPod implements nodeagent.PodRegistrar.
func (s *Store) UnregisterPod(uid string) {
	if s.cache != nil {
		s.cache.unregister(uid)
	}
}

// cached is the object of kind k, ns/name, from the cache when a
// registered pod references it (a copy of the caller's own, or with
// shared the cache's own, read-only); ok is false otherwise.
func cached[T objects.Object](ctx context.Context, s *Store, k objects.Kind, ns, name string, newT func() T, shared bool) (T, bool, error) {
	var zero T
	if s.cache == nil {
		return zero, false, nil
	}
	it, ok, err := s.cache.get(ctx, k.Key(ns, name))
	switch {
	case !ok:
		return zero, false, nil
	case err != nil:
		return zero, true, err
	}
	obj, found, err := object(it, newT, shared)
	switch {
	case err != nil:
		return zero, true, err
	case !found:
		return zero, true, fmt.Errorf("%w: %s %q", nodeagent.ErrNotFound, k.Resource, ns+"/"+name)
	}
	return obj, true, nil
}

// RequestServiceAccountToken implements nodeagent.TokenRequester, for the
// node pod is bound to.
func (s *Store) RequestServiceAccountToken(ctx context.Context, pod *corev1.Pod, audience string, expirationSeconds int64) (string, time.Time, error) {
	if s.nc == nil {
		return "", time.Time{}, nodeagent.ErrNoTokenRequester
	}
	md := pod.GetMetadata()
	sa := pod.GetSpec().GetServiceAccountName()
	if sa == "" {
		sa = "default"
	}
	return pipeline.RequestNodeToken(ctx, s.nc, pod.GetSpec().GetNodeName(), &apiv1.NodeTokenRequest{
		Namespace: md.GetNamespace(), PodName: md.GetName(), PodUid: md.GetUid(), ServiceAccount: sa,
		Audience: audience, ExpirationSeconds: expirationSeconds, PodRevision: objects.Revision(pod),
	})
}

// notFound maps the store's code to the agent's.
func notFound(err error) error {
	if errors.Is(err, raftstore.ErrNotFound) {
		return fmt.Errorf("%w: %w", nodeagent.ErrNotFound, err)
	}
	return err
}

// RegisterNode implements nodeagent.NodeStore. An existing node keeps what
// others set (spec.unschedulable, labels the agent does not own); the
// agent's labels, pod CIDR, taints and status replace the stored ones.
func (s *Store) RegisterNode(ctx context.Context, node *corev1.Node) error {
	for {
		fresh := proto.Clone(node).(*corev1.Node)
		if md := objects.Meta(fresh); md.CreationTimestamp == nil {
			md.CreationTimestamp = timestamppb.Now()
			if md.Uid == "" {
				md.Uid = uuid.NewString()
			}
		}
		_, err := s.s.Create(ctx, fresh)
		if !errors.Is(err, raftstore.ErrAlreadyExists) {
			return err
		}
		_, err = objects.Mutate(ctx, s.s, "", node.GetMetadata().GetName(), func(n *corev1.Node) error {
			md := objects.Meta(n)
			if md.Labels == nil {
				md.Labels = map[string]string{}
			}
			maps.Copy(md.Labels, node.GetMetadata().GetLabels())
			if n.Spec == nil {
				n.Spec = &corev1.NodeSpec{}
			}
			n.Spec.PodCidr, n.Spec.PodCidrs, n.Spec.Taints = node.GetSpec().GetPodCidr(), node.GetSpec().GetPodCidrs(), node.GetSpec().GetTaints()
			n.Status = node.GetStatus()
			return nil
		})
		if !errors.Is(err, raftstore.ErrNotFound) { // deleted meanwhile: create again
			return err
		}
	}
}

// UpdateNodeStatus implements nodeagent.NodeStore. The agent's status
// replaces the stored one, except for the resources others advertise
// through nodes/status (an extended resource such as example.com/gpu):
// see nodeagent.KeepAdvertised.
func (s *Store) UpdateNodeStatus(ctx context.Context, name string, st *corev1.NodeStatus) error {
	_, err := objects.Mutate(ctx, s.s, "", name, func(n *corev1.Node) error {
		next := proto.CloneOf(st)
		nodeagent.KeepAdvertised(next, n.GetStatus())
		n.Status = next
		return nil
	})
	return notFound(err)
}

var (
	_ nodeagent.NodeGetter = (*Store)(nil)
	_ nodeagent.NodeLister = (*Store)(nil)
)

// GetNode implements nodeagent.NodeGetter with a stale read (any replica,
// no leader round), as kubelet reads its node from the API server's cache
// before it decides whether its status changed: from a replica that has
// applied the node's last Lease renewal (raftstore.MinRevision), so that
// a change written before it (the node lifecycle controller's Unknown)
// is seen, however far behind some replica is.
func (s *Store) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := objects.Get[*corev1.Node](ctx, s.s, "", name, raftstore.Stale(), raftstore.MinRevision(s.leases.rev(name)))
	return n, notFound(err)
}

// ListNodes implements nodeagent.NodeLister with a stale read from a
// replica that has applied the latest Lease renewal of this Store's
// nodes (see GetNode). Each node holds only its name, resourceVersion and
// status, what a heartbeat reads of it (decodeListedNode): a simulated
// cluster lists its thousands of nodes every heartbeat interval.
func (s *Store) ListNodes(ctx context.Context) ([]*corev1.Node, error) {
	kvs, _, err := s.s.KV().List(ctx, objects.Nodes.Prefix(""), raftstore.Stale(), raftstore.MinRevision(s.leases.rev("")))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", objects.Nodes.Resource, err)
	}
	nodes := make([]*corev1.Node, 0, len(kvs))
	var buf []byte
	for _, kv := range kvs {
		n := &corev1.Node{}
		if buf, err = decodeListedNode(kv, n, buf); err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

var _ nodeagent.PodLister = (*Store)(nil)

// ListPods implements nodeagent.PodLister.
func (s *Store) ListPods(ctx context.Context) ([]*corev1.Pod, error) {
	pods, _, err := objects.List[*corev1.Pod](ctx, s.s, "")
	return pods, err
}

// ListNodePods implements nodeagent.NodeStore. It lists every pod and
// decodes the node's (the store has no index by node yet), of their
// status only what the agent reads (see decodeListedPod).
func (s *Store) ListNodePods(ctx context.Context, node string) ([]*corev1.Pod, error) {
	pods, err := s.ListPodsByNode(ctx)
	if err != nil {
		return nil, err
	}
	return pods(node)
}

var _ nodeagent.NodePodsLister = (*Store)(nil)

// ListPodsByNode implements nodeagent.NodePodsLister: one list of the
// store's pods, sorted by node on their encoding (spec.nodeName); pods
// decodes a node's pods each time it is called, of their status only
// what the agent reads (decodeListedPod). A full decode of every pod of
// a 20,000-pod cluster at once, most of the status thrown away, made a
// simulated cluster's reconcile hold ~100 MB of decoded pods at its peak.
func (s *Store) ListPodsByNode(ctx context.Context) (func(node string) ([]*corev1.Pod, error), error) {
	kvs, _, err := s.s.KV().List(ctx, objects.Pods.Prefix(""))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", objects.Pods.Resource, err)
	}
	byNode := map[string][]*raftstore.KV{}
	for _, kv := range kvs {
		node, err := encodedNodeName(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("objects: decode %q: %w", kv.Key, err)
		}
		byNode[node] = append(byNode[node], kv)
	}
	return func(node string) ([]*corev1.Pod, error) { // byNode is read-only from here on
		kvs := byNode[node]
		pods := make([]*corev1.Pod, 0, len(kvs))
		var buf []byte
		var err error
		for _, kv := range kvs {
			p := &corev1.Pod{}
			if buf, err = decodeListedPod(kv, p, buf); err != nil {
				return nil, err
			}
			pods = append(pods, p)
		}
		return pods, nil
	}, nil
}

// GetConfigMap implements nodeagent.NodeStore.
func (s *Store) GetConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return s.getConfigMap(ctx, ns, name, false)
}

var _ nodeagent.SharedConfigMapGetter = (*Store)(nil)

// GetSharedConfigMap implements nodeagent.SharedConfigMapGetter: a
// ConfigMap a registered pod references is the cache's decoded copy
// itself, not a copy of it (~600 bytes for kube-root-ca.crt's metadata
// and data map, at each pod's start and volume re-sync).
func (s *Store) GetSharedConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return s.getConfigMap(ctx, ns, name, true)
}

func (s *Store) getConfigMap(ctx context.Context, ns, name string, shared bool) (*corev1.ConfigMap, error) {
	if cm, ok, err := cached(ctx, s, objects.ConfigMaps, ns, name, func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, shared); ok {
		return cm, err
	}
	cm, err := objects.Get[*corev1.ConfigMap](ctx, s.s, ns, name)
	return cm, notFound(err)
}

// GetSecret implements nodeagent.NodeStore.
func (s *Store) GetSecret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	if sec, ok, err := cached(ctx, s, objects.Secrets, ns, name, func() *corev1.Secret { return &corev1.Secret{} }, false); ok {
		return sec, err
	}
	sec, err := objects.Get[*corev1.Secret](ctx, s.s, ns, name)
	return sec, notFound(err)
}

// Agent is what Handler drives: a *nodeagent.Agent, or a *sim.Cluster that
// routes by node.
type Agent interface {
	HandlePodBound(ctx context.Context, pod *corev1.Pod) error
	HandlePodDelete(ctx context.Context, pod *corev1.Pod, grace time.Duration) error
}

// Handler returns the bus handler of the node agent's inputs. PodScheduled
// reads the pod from the store and hands it to HandlePodBound (a pod gone
// or rebound meanwhile is ignored); PodDeleteRequested hands the pod to
// HandlePodDelete with its grace period, one spec second being specSecond;
// an agent that takes pods (nodeagent.PodTaker) is handed the pod over.
// Both are idempotent, so a redelivery is harmless.
//
// A PodScheduled of a fresh bind (its revision set) carries the pod as the
// bind wrote it; on its first delivery that copy is the pod, unread, when
// it is the event's pod (namespace, name, uid), bound to the event's node,
// at exactly the bind's revision. Otherwise, and on every redelivery, it
// first reads the pod
// with a stale read (any replica, no leader round) from a replica that has
// applied the bind's revision (raftstore.MinRevision): a copy with the
// event's uid, bound to the event's node, at the bind's revision or later
// is the pod as that bind or a later write left it — what a kubelet's
// informer would hand it. Anything else (not found, older than the bind,
// another uid or node: a replica behind) is read again, and decided, on a
// linearizable read, as is every PodDeleteRequested. A copy with a
// deletionTimestamp is handed to HandlePodDelete. A copy that lags behind
// a deletion the node already carried out (a redelivery read from a
// replica behind) is refused by the agent's tombstone of the uid
// (nodeagent: kept 10 minutes, at most 64k).
func Handler(s *objects.Store, a Agent, specSecond time.Duration) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) error {
		env := d.Envelope
		pod, ok := boundCopy(ctx, s, d)
		var err error
		if !ok {
			pod, err = objects.Get[*corev1.Pod](ctx, s, env.GetNamespace(), env.GetPodName())
		}
		switch {
		case errors.Is(err, raftstore.ErrNotFound):
			pod = nil
		case err != nil:
			return err
		case pod.GetMetadata().GetUid() != env.GetPodUid():
			pod = nil // a namesake: the pod of the event is gone
		}
		switch {
		case env.GetPodScheduled() != nil:
			switch {
			case pod == nil || pod.GetSpec().GetNodeName() != env.GetNodeName():
				return nil
			case pod.GetMetadata().GetDeletionTimestamp() != nil: // being deleted: never started
				err = a.HandlePodDelete(ctx, pod, -1)
			default:
				err = bound(ctx, a, pod)
			}
		case env.GetPodDeleteRequested() != nil:
			if pod == nil { // the store forgot it: tear down what the node may hold
				pod = &corev1.Pod{
					Metadata: &corev1.ObjectMeta{Uid: env.GetPodUid(), Namespace: env.GetNamespace(), Name: env.GetPodName()},
					Spec:     &corev1.PodSpec{NodeName: env.GetNodeName()},
				}
			}
			grace := time.Duration(-1)
			if g := env.GetPodDeleteRequested().GracePeriodSeconds; g != nil {
				grace = time.Duration(*g) * specSecond
			}
			err = a.HandlePodDelete(ctx, pod, grace)
		default:
			return bus.Permanent(fmt.Errorf("nodeagent: unexpected event %s", env.Type()))
		}
		if errors.Is(err, nodeagent.ErrWrongNode) {
			return nil // another agent's pod (a shared consumer)
		}
		return err
	}
}

// bound hands a the pod the caller decoded for it: over (TakePodBound)
// when a takes pods, so that the agent keeps it instead of a copy.
func bound(ctx context.Context, a Agent, pod *corev1.Pod) error {
	if t, ok := a.(nodeagent.PodTaker); ok {
		return t.TakePodBound(ctx, pod)
	}
	return a.HandlePodBound(ctx, pod)
}

// staleReadTimeout bounds boundCopy's read.
const staleReadTimeout = 2 * time.Second

// boundCopy is Handler's copy of a PodScheduled's pod, the event's own or
// a stale read; ok when it decides alone (see Handler).
func boundCopy(ctx context.Context, s *objects.Store, d *bus.Delivery) (*corev1.Pod, bool) {
	env := d.Envelope
	rev := env.GetPodScheduled().GetRevision()
	if rev <= 0 {
		return nil, false
	}
	if pod := env.GetPodScheduled().GetPod(); pod != nil && d.NumDelivered <= 1 {
		// The bind's own copy, from the one role that may both publish
		// PodScheduled and write pods: what the read would return at
		// exactly rev. A redelivery reads, as the pod may have gone
		// meanwhile; so does a copy that is not the event's pod at rev.
		if boundAt(pod, env, rev) && objects.Revision(pod) == rev {
			return pod, true
		}
	}
	// At the bind's revision at least: a replica behind it would not yet
	// see the pod bound here (its read filter refuses the node) and waits.
	// Briefly: one that does not get there (a replica cut off, a revision
	// the store lost) leaves the decision to the linearizable read.
	sctx, cancel := context.WithTimeout(ctx, staleReadTimeout)
	defer cancel()
	pod, err := objects.Get[*corev1.Pod](sctx, s, env.GetNamespace(), env.GetPodName(), raftstore.Stale(), raftstore.MinRevision(rev))
	if err != nil || !boundAt(pod, env, rev) {
		return nil, false
	}
	return pod, true
}

// boundAt: pod is env's pod (its namespace, name and uid), bound to env's
// node, at rev or later.
func boundAt(pod *corev1.Pod, env *eventsv1.Envelope, rev int64) bool {
	md := pod.GetMetadata()
	return md.GetNamespace() == env.GetNamespace() && md.GetName() == env.GetPodName() && md.GetUid() == env.GetPodUid() &&
		pod.GetSpec().GetNodeName() == env.GetNodeName() && objects.Revision(pod) >= rev
}

var _ nodeagent.LeaseRenewer = (*Store)(nil)

// leaseSpec is the content of a coordination.k8s.io/v1 Lease that a node
// writes (its spec), as kubelet's nodelease controller fills it.
type leaseSpec struct {
	Spec struct {
		HolderIdentity       string `json:"holderIdentity"`
		LeaseDurationSeconds int32  `json:"leaseDurationSeconds"`
		RenewTime            string `json:"renewTime"`
	} `json:"spec"`
}

// RenewNodeLease implements nodeagent.LeaseRenewer: the node's Lease in
// kube-node-lease, created at the first heartbeat, its renewTime set to
// now (kube's MicroTime) at every one, with compare-and-swap. As kubelet's
// lease controller (renewLease from its latestLease), it updates the copy
// it last wrote without reading it first: one write per renewal. It reads
// the Lease only when it holds none (the first renewal, or after a failed
// one) and after a conflict or a missing Lease, then tries again.
func (s *Store) RenewNodeLease(ctx context.Context, node string, duration time.Duration, now time.Time) error {
	if duration <= 0 {
		duration = 40 * time.Second
	}
	var spec leaseSpec
	spec.Spec.HolderIdentity, spec.Spec.LeaseDurationSeconds = node, int32(duration/time.Second)
	spec.Spec.RenewTime = now.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	content, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	lease := s.leases.get(node)
	for {
		if lease == nil {
			obj, err := s.s.GetKind(ctx, objects.Leases, pipeline.NodeLeaseNamespace, node)
			if errors.Is(err, raftstore.ErrNotFound) {
				lease = objects.Leases.New().(*corev1.Unstructured)
				lease.Metadata = &corev1.ObjectMeta{Name: node, Namespace: pipeline.NodeLeaseNamespace, Uid: uuid.NewString(), CreationTimestamp: timestamppb.New(now)}
				lease.Content = content
				_, err = s.s.Create(ctx, lease)
				if errors.Is(err, raftstore.ErrAlreadyExists) {
					lease = nil
					continue
				}
				if err != nil {
					return err
				}
				s.leases.set(node, lease)
				return nil
			}
			if err != nil {
				return err
			}
			lease = obj.(*corev1.Unstructured)
		}
		lease.Content = content
		_, err = s.s.Update(ctx, lease)
		switch {
		case err == nil:
			s.leases.set(node, lease)
			return nil
		case errors.Is(err, raftstore.ErrConflict) || errors.Is(err, raftstore.ErrNotFound):
			lease = nil // another writer, or deleted: read again
			if ctx.Err() != nil {
				return ctx.Err()
			}
		default: // the outcome is unknown: read before the next renewal
			s.leases.set(node, nil)
			return err
		}
	}
}

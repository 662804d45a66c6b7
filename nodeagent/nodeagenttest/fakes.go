// Package nodeagenttest provides in-memory fakes of the agent's
// dependencies (Publisher, NodeStore) for unit tests and simulations.
package nodeagenttest

import (
	"context"
	"fmt"
	"sync"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"google.golang.org/protobuf/proto"
)

// Publisher records every envelope it acknowledges, dropping duplicates by
// id as JetStream's dedup window would, and unfolded as a reader of the
// stream sees them (eventsv1.Unfold: a report's steps are envelopes of
// their own); Messages counts the messages themselves. Fail makes the next
// n publishes fail.
type Publisher struct {
	mu      sync.Mutex
	envs    []*eventsv1.Envelope
	ids     map[string]bool
	failN   int
	dups    int
	msgs    int
	changed chan struct{}
}

var _ nodeagent.Publisher = (*Publisher)(nil)

// NewPublisher returns an empty Publisher.
func NewPublisher() *Publisher {
	return &Publisher{ids: map[string]bool{}, changed: make(chan struct{})}
}

// ErrInjected is what a publish made to fail by Fail returns.
var ErrInjected = fmt.Errorf("nodeagenttest: injected publish failure")

// Publish implements nodeagent.Publisher.
func (p *Publisher) Publish(ctx context.Context, env *eventsv1.Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failN > 0 {
		p.failN--
		return ErrInjected
	}
	if p.ids[env.GetId()] {
		p.dups++
		return nil
	}
	p.ids[env.GetId()] = true
	p.msgs++
	// As a reader of the stream: a report's steps are events of their own.
	for _, e := range eventsv1.Unfold(proto.Clone(env).(*eventsv1.Envelope)) {
		p.envs = append(p.envs, e)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	return nil
}

// Messages returns how many messages were published and kept (a report
// and the steps it carries are one).
func (p *Publisher) Messages() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.msgs
}

// Fail makes the next n publishes fail with ErrInjected.
func (p *Publisher) Fail(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failN = n
}

// Envelopes returns what was published, in order.
func (p *Publisher) Envelopes() []*eventsv1.Envelope {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*eventsv1.Envelope(nil), p.envs...)
}

// Duplicates counts publishes dropped as duplicates.
func (p *Publisher) Duplicates() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dups
}

// Pod returns the envelopes about the pod, in order.
func (p *Publisher) Pod(uid string) []*eventsv1.Envelope {
	var out []*eventsv1.Envelope
	for _, e := range p.Envelopes() {
		if e.GetPodUid() == uid {
			out = append(out, e)
		}
	}
	return out
}

// Wait blocks until cond holds over the published envelopes, or ctx ends.
func (p *Publisher) Wait(ctx context.Context, cond func([]*eventsv1.Envelope) bool) error {
	for {
		p.mu.Lock()
		envs := append([]*eventsv1.Envelope(nil), p.envs...)
		ch := p.changed
		p.mu.Unlock()
		if cond(envs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodeagenttest: condition not met after %d envelopes: %w", len(envs), ctx.Err())
		case <-ch:
		}
	}
}

// Store is an in-memory NodeStore.
type Store struct {
	mu         sync.Mutex
	nodes      map[string]*corev1.Node
	updates    map[string]int
	pods       map[string]*corev1.Pod // by uid
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	lists      int
	nodeLists  int
}

var _ nodeagent.NodeStore = (*Store)(nil)

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{nodes: map[string]*corev1.Node{}, updates: map[string]int{}, pods: map[string]*corev1.Pod{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
}

// RegisterNode implements nodeagent.NodeStore.
func (s *Store) RegisterNode(ctx context.Context, node *corev1.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[node.GetMetadata().GetName()] = proto.Clone(node).(*corev1.Node)
	return ctx.Err()
}

// UpdateNodeStatus implements nodeagent.NodeStore.
func (s *Store) UpdateNodeStatus(ctx context.Context, name string, st *corev1.NodeStatus) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return fmt.Errorf("node %q: %w", name, nodeagent.ErrNotFound)
	}
	n.Status = proto.Clone(st).(*corev1.NodeStatus)
	s.updates[name]++
	return ctx.Err()
}

// ListNodePods implements nodeagent.NodeStore.
func (s *Store) ListNodePods(ctx context.Context, node string) ([]*corev1.Pod, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range s.pods {
		if p.GetSpec().GetNodeName() == node {
			out = append(out, proto.Clone(p).(*corev1.Pod))
		}
	}
	return out, ctx.Err()
}

var _ nodeagent.PodLister = (*Store)(nil)

// ListPods implements nodeagent.PodLister and counts its calls.
func (s *Store) ListPods(ctx context.Context) ([]*corev1.Pod, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	out := make([]*corev1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		out = append(out, proto.Clone(p).(*corev1.Pod))
	}
	return out, ctx.Err()
}

var _ nodeagent.NodeLister = (*Store)(nil)

// ListNodes implements nodeagent.NodeLister and counts its calls. The
// Store is no nodeagent.NodeGetter: an agent over it alone compares its
// status with the one it last wrote.
func (s *Store) ListNodes(ctx context.Context) ([]*corev1.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodeLists++
	out := make([]*corev1.Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, proto.Clone(n).(*corev1.Node))
	}
	return out, ctx.Err()
}

// NodeLists counts ListNodes calls.
func (s *Store) NodeLists() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodeLists
}

// PodLists counts ListPods calls.
func (s *Store) PodLists() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}

// GetConfigMap implements nodeagent.NodeStore.
func (s *Store) GetConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cm, ok := s.configMaps[ns+"/"+name]
	if !ok {
		return nil, fmt.Errorf("configmap %q: %w", ns+"/"+name, nodeagent.ErrNotFound)
	}
	return proto.Clone(cm).(*corev1.ConfigMap), ctx.Err()
}

// GetSecret implements nodeagent.NodeStore.
func (s *Store) GetSecret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, ok := s.secrets[ns+"/"+name]
	if !ok {
		return nil, fmt.Errorf("secret %q: %w", ns+"/"+name, nodeagent.ErrNotFound)
	}
	return proto.Clone(sec).(*corev1.Secret), ctx.Err()
}

// PutPod stores (or replaces) a pod.
func (s *Store) PutPod(p *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[p.GetMetadata().GetUid()] = proto.Clone(p).(*corev1.Pod)
}

// DeletePod removes a pod.
func (s *Store) DeletePod(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, uid)
}

// PutConfigMap stores a ConfigMap.
func (s *Store) PutConfigMap(cm *corev1.ConfigMap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	md := cm.GetMetadata()
	s.configMaps[md.GetNamespace()+"/"+md.GetName()] = proto.Clone(cm).(*corev1.ConfigMap)
}

// PutSecret stores a Secret.
func (s *Store) PutSecret(sec *corev1.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	md := sec.GetMetadata()
	s.secrets[md.GetNamespace()+"/"+md.GetName()] = proto.Clone(sec).(*corev1.Secret)
}

// Node returns the registered node.
func (s *Store) Node(name string) (*corev1.Node, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok {
		return nil, false
	}
	return proto.Clone(n).(*corev1.Node), true
}

// Nodes counts registered nodes; StatusUpdates counts a node's status updates.
func (s *Store) Nodes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.nodes)
}

// StatusUpdates counts the status updates of the named node.
func (s *Store) StatusUpdates(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updates[name]
}

package api

// The caches of the objects bound ServiceAccount tokens name. The api
// process follows every pod, ServiceAccount and Node with an informer:
// the authenticator checks that the pod or ServiceAccount a token names
// still exists with its uid (auth.TokenAuthenticator), and a node agent's
// token request (apiserver.NodeTokens) reads the pod, its ServiceAccount
// and its Node from the same caches (Stage implements
// apiserver.TokenCache), as kube-apiserver's NodeRestriction admission
// reads pods and nodes from its informers: without a store read per
// request. A cache is never newer than the store; NodeTokens reads the
// store whenever a cached copy does not hold what a request names, after
// waiting for the pod cache to reach the revision the node saw the pod at
// (WaitPods).
//
// Pods are decoded as far as that needs (decodePodBinding): the identity,
// deletionTimestamp, spec.nodeName and spec.serviceAccountName, the spec
// shared by the pods of a node and ServiceAccount; Nodes as their
// identity alone.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/informer"
	"github.com/podflow/podflow/services/objects"
)

// newTokenCaches makes the informers of tokencache.go (run by Start).
func (s *Stage) newTokenCaches() error {
	var err error
	s.accounts, err = informer.New(s.env.Store, "", informer.Handlers[*corev1.ServiceAccount]{
		OnAdd:    s.authn.UpsertServiceAccount,
		OnUpdate: func(_, sa *corev1.ServiceAccount) { s.authn.UpsertServiceAccount(sa) },
		OnDelete: func(sa *corev1.ServiceAccount) {
			md := sa.GetMetadata()
			s.authn.DeleteServiceAccount(md.GetNamespace(), md.GetName())
		},
	})
	if err != nil {
		return err
	}
	// The handlers run once the cache holds the change: they advance
	// podsAt to the revision it reflects.
	s.pods, err = informer.NewDecoding(s.env.Store, "", informer.Handlers[*corev1.Pod]{
		OnAdd: func(p *corev1.Pod) {
			s.authn.UpsertPod(p)
			s.podsAt.advance(s.pods.Revision())
		},
		OnUpdate: func(_, p *corev1.Pod) {
			s.authn.UpsertPod(p)
			s.podsAt.advance(s.pods.Revision())
		},
		OnDelete: func(p *corev1.Pod) {
			md := p.GetMetadata()
			s.authn.DeletePod(md.GetNamespace(), md.GetName())
			s.podsAt.advance(s.pods.Revision())
		},
	}, podBindingDecoder())
	if err != nil {
		return err
	}
	s.nodes, err = informer.NewMeta[*corev1.Node](s.env.Store, "", informer.Handlers[*corev1.Node]{})
	return err
}

// CachedPod implements apiserver.TokenCache: the pod as decodePodBinding
// keeps it.
func (s *Stage) CachedPod(namespace, name string) (*corev1.Pod, bool) {
	return s.pods.Get(namespace, name)
}

// WaitPods implements apiserver.PodCacheWaiter: it returns once the pod
// cache has reached revision rev, or false when ctx is done first.
func (s *Stage) WaitPods(ctx context.Context, rev int64) bool {
	return s.podsAt.wait(ctx, rev)
}

// revisionGate is a revision that only grows (advance), and waits for it
// to reach one (wait). The zero value is at revision 0. Safe for
// concurrent use.
type revisionGate struct {
	rev     atomic.Int64
	waiting atomic.Int32 // len(waiters), read without mu by advance
	mu      sync.Mutex
	waiters []revisionWaiter
}

type revisionWaiter struct {
	rev  int64
	done chan struct{}
}

// advance moves the gate to rev (when it is ahead) and releases the
// waiters it reaches.
func (g *revisionGate) advance(rev int64) {
	for cur := g.rev.Load(); rev > cur; cur = g.rev.Load() {
		if g.rev.CompareAndSwap(cur, rev) {
			break
		}
	}
	if g.waiting.Load() == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.rev.Load()
	g.waiters = slices.DeleteFunc(g.waiters, func(w revisionWaiter) bool {
		if w.rev <= cur {
			close(w.done)
			return true
		}
		return false
	})
	g.waiting.Store(int32(len(g.waiters)))
}

// wait returns true once the gate is at rev or past it, false when ctx
// is done first.
func (g *revisionGate) wait(ctx context.Context, rev int64) bool {
	if g.rev.Load() >= rev {
		return true
	}
	w := revisionWaiter{rev: rev, done: make(chan struct{})}
	g.mu.Lock()
	// Counted before the revision is read again: an advance that finds
	// no waiter has stored its revision before this read.
	g.waiting.Add(1)
	if g.rev.Load() >= rev {
		g.waiting.Add(-1)
		g.mu.Unlock()
		return true
	}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	select {
	case <-w.done:
		return true
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if i := slices.IndexFunc(g.waiters, func(o revisionWaiter) bool { return o.done == w.done }); i >= 0 {
		g.waiters = slices.Delete(g.waiters, i, i+1)
		g.waiting.Store(int32(len(g.waiters)))
	}
	return g.rev.Load() >= rev
}

// CachedServiceAccount implements apiserver.TokenCache.
func (s *Stage) CachedServiceAccount(namespace, name string) (*corev1.ServiceAccount, bool) {
	return s.accounts.Get(namespace, name)
}

// CachedNode implements apiserver.TokenCache: the node's identity.
func (s *Stage) CachedNode(name string) (*corev1.Node, bool) {
	return s.nodes.Get("", name)
}

// PodSpec's fields decodePodBinding keeps, and Pod's spec, from the
// descriptors.
var podBindingFields = func() (f struct{ spec, nodeName, serviceAccount protowire.Number }) {
	f.spec = (&corev1.Pod{}).ProtoReflect().Descriptor().Fields().ByName("spec").Number()
	d := (&corev1.PodSpec{}).ProtoReflect().Descriptor().Fields()
	f.nodeName = d.ByName("node_name").Number()
	f.serviceAccount = d.ByName("service_account_name").Number()
	return f
}()

// podBindingDecoder returns decodePodBinding with what pods share
// interned: a few hundred distinct node and ServiceAccount names, and
// the specs holding them (one per node and ServiceAccount pair, shared
// by every pod of the pair, as the informer's objects are never
// modified), so a cached pod costs its metadata alone. The decoder is
// called by one informer's goroutine alone.
func podBindingDecoder() func(*raftstore.KV, objects.Object) error {
	type binding struct{ node, account string }
	names := map[string]string{}
	specs := map[binding]*corev1.PodSpec{}
	intern := func(node, account []byte) *corev1.PodSpec {
		if len(names) >= maxInterned || len(specs) >= maxInterned {
			clear(names)
			clear(specs)
		}
		name := func(b []byte) string {
			if s, ok := names[string(b)]; ok {
				return s
			}
			s := string(b)
			names[s] = s
			return s
		}
		k := binding{name(node), name(account)}
		spec, ok := specs[k]
		if !ok {
			spec = &corev1.PodSpec{NodeName: k.node, ServiceAccountName: k.account}
			specs[k] = spec
		}
		return spec
	}
	return func(kv *raftstore.KV, obj objects.Object) error { return decodePodBinding(kv, obj, intern) }
}

// maxInterned bounds podBindingDecoder's names and specs (it starts
// again past it).
const maxInterned = 1 << 14

// decodePodBinding is objects.DecodeMeta (the identity and
// deletionTimestamp) of a pod that keeps spec.nodeName and
// spec.serviceAccountName too, in the spec intern returns for them: what
// the authenticator and a node's token request read of a pod, at a
// fraction of a full decode.
func decodePodBinding(kv *raftstore.KV, obj objects.Object, intern func(node, account []byte) *corev1.PodSpec) error {
	if err := objects.DecodeMeta(kv, obj); err != nil {
		return err
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("api: decode %q: %T is not a Pod", kv.Key, obj)
	}
	var node, account []byte
	for b := kv.Value; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("api: decode %q: %w", kv.Key, protowire.ParseError(n))
		}
		b = b[n:]
		if num != podBindingFields.spec || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return fmt.Errorf("api: decode %q: %w", kv.Key, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("api: decode %q: %w", kv.Key, protowire.ParseError(n))
		}
		b = b[n:]
		// A repeated spec merges, as proto.Unmarshal: the last of each
		// field set wins.
		if err := decodeSpecBinding(v, &node, &account); err != nil {
			return fmt.Errorf("api: decode %q: %w", kv.Key, err)
		}
	}
	p.Spec = intern(node, account)
	return nil
}

func decodeSpecBinding(b []byte, node, account *[]byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == podBindingFields.nodeName || num == podBindingFields.serviceAccount) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if num == podBindingFields.nodeName {
				*node = v
			} else {
				*account = v
			}
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

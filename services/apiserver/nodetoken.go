package apiserver

// Projected serviceAccountToken volumes. A node agent cannot sign tokens:
// the key is the api process's. As kubelet asks kube-apiserver's
// TokenRequest API, a node agent asks NodeTokens, on
// pipeline.TokenPrefix.<node> (apiv1.NodeTokenRequest), for a token of one
// of its pods. The bus lets only node <node>'s agent publish on that
// subject (a simulated cluster's agent: any node's), so the subject is who
// asks. NodeTokens then checks what kube-apiserver's node authorizer and
// NodeRestriction admission check of a node's TokenRequest:
//
//  1. the pod exists (404) with the uid the node names (409: deleted and
//     recreated);
//  2. it is bound to the asking node (403);
//  3. the ServiceAccount asked for is the pod's own (403) and exists (404);
//  4. expirationSeconds is at least 10 minutes and at most 2^32 s (422);
//     0 is one hour; the audience is at most 1024 bytes (422), empty is the
//     api server's own.
//
// The token is bound to the pod (boundObjectRef Pod with its uid): it
// stops authenticating once the pod is gone (auth.TokenAuthenticator).
// The pod, ServiceAccount and Node are read as kube-apiserver's
// NodeRestriction admission reads the pod and node, from informers: from
// the api process's caches (NodeTokens.Cache) when they hold what the
// request names, else from any replica, with a read from the leader
// whenever that copy does not hold it either (freshGet). A request naming
// the revision the node saw its pod at first waits, a moment at most
// (MaxPodCacheWait), for the pod cache to reach it (PodCacheWaiter): a
// node agent asks for a pod's token as soon as it sees the pod bound,
// often before the api process's cache has seen the bind.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/vt"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
)

// NodeTokens signs node agents' projected serviceAccountTokens in the api
// process (see the comment above), serving pipeline.TokenPrefix.* in the
// api replicas' queue group.
type NodeTokens struct {
	NATS  *nats.Conn
	Store *objects.Store
	// Tokens signs the tokens; nil: every request is answered 404
	// (TokenRequest is off).
	Tokens *auth.BoundTokens
	// Workers serve the requests (at least 1).
	Workers int
	Log     *slog.Logger
	// Cache, when set, holds the pods, ServiceAccounts and Nodes the
	// api process follows with informers: a request whose pod the cache
	// holds with the uid, node and ServiceAccount the request names is
	// decided without a store read (see cachedGet). Nil: every object
	// is read from the store.
	Cache TokenCache
}

// TokenCache is what NodeTokens reads from the api process's informers
// (services/stages/api's Stage). Each method returns the cached object
// or false; the objects may be partial, but a pod holds at least its
// identity (name, namespace, uid), spec.nodeName and
// spec.serviceAccountName, a ServiceAccount and a Node their identity.
// The objects are shared: not modified. Safe for concurrent use.
type TokenCache interface {
	CachedPod(namespace, name string) (*corev1.Pod, bool)
	CachedServiceAccount(namespace, name string) (*corev1.ServiceAccount, bool)
	CachedNode(name string) (*corev1.Node, bool)
}

// PodCacheWaiter is a TokenCache whose pods can be waited for.
// WaitPods returns once the cached pods reflect the store at revision rev
// or later (true), or when ctx is done first (false). Safe for
// concurrent use.
type PodCacheWaiter interface {
	WaitPods(ctx context.Context, rev int64) bool
}

// MaxPodCacheWait bounds how long a token request waits for the pod cache
// to reach the revision the node saw its pod at before it reads the pod
// from the store.
const MaxPodCacheWait = 500 * time.Millisecond

// Start serves the requests until ctx is done, on g; it returns once the
// server has the subscription.
func (n *NodeTokens) Start(ctx context.Context, g *errgroup.Group) error {
	if n.Workers < 1 {
		return fmt.Errorf("%w: NodeTokens.Workers (%d) must be at least 1", ErrInvalidConfig, n.Workers)
	}
	if n.Log == nil {
		n.Log = slog.Default()
	}
	if err := stage.Serve(ctx, g, n.NATS, pipeline.TokenPrefix+".*", pipeline.API, n.Workers, n.onNodeToken); err != nil {
		return fmt.Errorf("apiserver: node tokens: %w", err)
	}
	return nil
}

// onNodeToken answers a node agent's NodeTokenRequest. A request whose
// reply subject is not an inbox of a node role is dropped: the token goes
// to nobody but a node agent.
func (n *NodeTokens) onNodeToken(ctx context.Context, m *nats.Msg) {
	enc, ok := strings.CutPrefix(m.Subject, pipeline.TokenPrefix+".")
	node, err := bus.DecodeToken(enc)
	if !ok || err != nil || node == "" {
		n.Log.Warn("token request dropped: bad subject", "subject", m.Subject)
		return
	}
	if err := checkNodeReply(m.Reply); err != nil {
		n.Log.Warn("request dropped: bad reply subject", "subject", m.Subject, "reply", m.Reply, "err", err)
		return
	}
	req := &apiv1.NodeTokenRequest{}
	resp := &apiv1.NodeTokenResponse{}
	if err := vt.Unmarshal(m.Data, req); err != nil {
		resp.Status = stage.Failure(400, eventsv1.ReasonBadRequest, "TokenRequest", "", "decode NodeTokenRequest: %v", err)
	} else {
		var tok string
		var exp time.Time
		resp.Status, tok, exp = n.nodeToken(ctx, node, req)
		if resp.Status == nil {
			resp.Token, resp.Expiration = tok, timestamppb.New(exp)
		}
	}
	data, err := vt.Marshal(resp)
	if err != nil {
		return
	}
	_ = n.NATS.Publish(m.Reply, data)
}

// checkNodeReply: a token answer goes only to a node role's inbox.
func checkNodeReply(subject string) error {
	if err := stage.CheckReplySubject(subject); err != nil {
		return err
	}
	for _, p := range []string{bus.InboxPrefix(pipeline.NodeRolePrefix), bus.InboxPrefix(pipeline.SimNodesRolePrefix)} {
		if strings.HasPrefix(subject, p) {
			return nil
		}
	}
	return fmt.Errorf("%w: %q: a token is answered only to a node agent's inbox", stage.ErrReplySubject, subject)
}

// nodeToken checks node's request (see the file comment) and issues the
// token.
func (n *NodeTokens) nodeToken(ctx context.Context, node string, req *apiv1.NodeTokenRequest) (*corev1.Status, string, time.Time) {
	const kind = "TokenRequest"
	name := req.GetServiceAccount()
	if n.Tokens == nil {
		return stage.Failure(404, eventsv1.ReasonNotFound, kind, name, "the api stage has no ServiceAccount signing key (TokenRequest is off)"), "", time.Time{}
	}
	if st := checkTokenRequest(req); st != nil {
		return st, "", time.Time{}
	}
	ns, podName := req.GetNamespace(), req.GetPodName()
	// The pod's uid, node and ServiceAccount never change, so a copy with
	// the uid asked for, bound to the node, decides; any other answer is
	// read again from the leader (see freshGet).
	decides := func(p *corev1.Pod) bool {
		return p.GetMetadata().GetUid() == req.GetPodUid() && p.GetSpec().GetNodeName() == node && PodServiceAccount(p) == name
	}
	pod, err := cachedGet(ctx, n.Store, n.cachedPodAt(ctx, req.GetPodRevision(), decides), ns, podName, decides)
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		return stage.Failure(404, eventsv1.ReasonNotFound, "pods", podName, "pods %q not found", podName), "", time.Time{}
	case err != nil:
		return stage.Internal(err), "", time.Time{}
	}
	if uid := pod.GetMetadata().GetUid(); uid != req.GetPodUid() {
		return stage.Failure(409, eventsv1.ReasonConflict, "pods", podName,
			"Operation cannot be fulfilled on pods %q: the UID in the bound object reference (%s) does not match the UID in record (%s). The object might have been deleted and then recreated",
			podName, req.GetPodUid(), uid), "", time.Time{}
	}
	if pod.GetSpec().GetNodeName() != node {
		return nodeForbidden(node, ns, name, "node requested token bound to a pod scheduled on a different node"), "", time.Time{}
	}
	if sa := PodServiceAccount(pod); sa != name {
		return nodeForbidden(node, ns, name, "no relationship found between node '"+node+"' and this object: pod "+podName+" runs as serviceaccount "+sa), "", time.Time{}
	}
	sa, err := cachedGet(ctx, n.Store, n.cachedServiceAccount, ns, name, func(*corev1.ServiceAccount) bool { return true })
	switch {
	case errors.Is(err, raftstore.ErrNotFound):
		return stage.Failure(404, eventsv1.ReasonNotFound, "serviceaccounts", name, "serviceaccounts %q not found", name), "", time.Time{}
	case err != nil:
		return stage.Internal(err), "", time.Time{}
	}
	var aud []string
	if a := req.GetAudience(); a != "" {
		aud = []string{a}
	}
	obj := auth.BoundObject{Kind: auth.BoundKindPod, Name: podName, UID: pod.GetMetadata().GetUid(), NodeName: node}
	switch nd, err := cachedGet(ctx, n.Store, n.cachedNode, "", node, func(*corev1.Node) bool { return true }); {
	case errors.Is(err, raftstore.ErrNotFound): // the node's name alone, as kube-apiserver
	case err != nil:
		return stage.Internal(err), "", time.Time{}
	default:
		obj.NodeUID = nd.GetMetadata().GetUid()
	}
	tok, exp, err := n.Tokens.Issue(ns, name, sa.GetMetadata().GetUid(), obj,
		aud, time.Duration(req.GetExpirationSeconds())*time.Second, time.Now())
	if err != nil {
		return stage.Internal(err), "", time.Time{}
	}
	return nil, tok, exp
}

// freshGet reads an object for a token request as kube-apiserver does,
// from what is already replicated: a stale read, served by any replica
// without a round through the leader. A copy that decides is taken; one
// that does not (decides false), an object not found and a failed read
// are read again, linearizably, and that answer stands. So a replica
// behind (a pod just bound or recreated, a ServiceAccount just created)
// never refuses a request, and a copy is accepted only when it holds what
// the request names: a pod's uid, node and ServiceAccount never change,
// and a token bound to a pod or ServiceAccount deleted meanwhile does not
// authenticate (auth.TokenAuthenticator checks both uids).
func freshGet[T objects.Object](ctx context.Context, s *objects.Store, ns, name string, decides func(T) bool) (T, error) {
	if o, err := objects.Get[T](ctx, s, ns, name, raftstore.Stale()); err == nil && decides(o) {
		return o, nil
	}
	return objects.Get[T](ctx, s, ns, name)
}

// cachedGet is freshGet that first looks in the api process's cache
// (cached, nil when there is none): a cached copy that decides is taken
// as a stale read's would be, anything else is read from the store. The
// cache follows the store's watch, so it is never newer than the store
// and no staler than a replica behind: a pod it has seen deleted is not
// in it (the store then answers 404), one deleted and recreated holds
// its new uid (the node's old uid does not decide, and the store answers
// 409), and a copy holding the uid the node names holds that pod's node
// and ServiceAccount, which never change.
func cachedGet[T objects.Object](ctx context.Context, s *objects.Store, cached func(ns, name string) (T, bool), ns, name string, decides func(T) bool) (T, error) {
	if cached != nil {
		if o, ok := cached(ns, name); ok && decides(o) {
			return o, nil
		}
	}
	return freshGet(ctx, s, ns, name, decides)
}

// cachedPodAt is cachedPod for a request naming the revision rev (0:
// none) the node saw the pod at: a cached copy that does not decide is
// looked up again once the cache has reached rev, when it does within
// MaxPodCacheWait. The cache then holds the pod as the node saw it or
// newer: a copy that still does not decide (the pod deleted or recreated
// meanwhile) is read from the store, as before.
func (n *NodeTokens) cachedPodAt(ctx context.Context, rev int64, decides func(*corev1.Pod) bool) func(ns, name string) (*corev1.Pod, bool) {
	w, ok := n.Cache.(PodCacheWaiter)
	if rev <= 0 || !ok {
		return n.cachedPod
	}
	return func(ns, name string) (*corev1.Pod, bool) {
		if p, ok := n.cachedPod(ns, name); ok && decides(p) {
			return p, true
		}
		wctx, cancel := context.WithTimeout(ctx, MaxPodCacheWait)
		reached := w.WaitPods(wctx, rev)
		cancel()
		if !reached {
			return nil, false
		}
		return n.cachedPod(ns, name)
	}
}

// cachedPod, cachedServiceAccount and cachedNode are n.Cache's readers,
// nil without a cache.
func (n *NodeTokens) cachedPod(ns, name string) (*corev1.Pod, bool) {
	if n.Cache == nil {
		return nil, false
	}
	return n.Cache.CachedPod(ns, name)
}

func (n *NodeTokens) cachedServiceAccount(ns, name string) (*corev1.ServiceAccount, bool) {
	if n.Cache == nil {
		return nil, false
	}
	return n.Cache.CachedServiceAccount(ns, name)
}

func (n *NodeTokens) cachedNode(_, name string) (*corev1.Node, bool) {
	if n.Cache == nil {
		return nil, false
	}
	return n.Cache.CachedNode(name)
}

// checkTokenRequest validates the request's fields as kube-apiserver
// validates a TokenRequest (and the projection's expirationSeconds).
func checkTokenRequest(req *apiv1.NodeTokenRequest) *corev1.Status {
	name := req.GetServiceAccount()
	invalid := func(field, why string) *corev1.Status {
		st := stage.Failure(422, eventsv1.ReasonInvalid, "TokenRequest", name,
			"TokenRequest.authentication.k8s.io %q is invalid: %s: Invalid value: %s", name, field, why)
		st.Causes = []*corev1.StatusCause{{Type: "FieldValueInvalid", Field: field, Message: "Invalid value: " + why}}
		return st
	}
	if e := req.GetExpirationSeconds(); e != 0 { // 0: unset
		if why := auth.CheckTokenExpiration(e); why != "" {
			return invalid("spec.expirationSeconds", why)
		}
	}
	if len(req.GetAudience()) > auth.MaxTokenAudienceBytes {
		return invalid("spec.audiences", "an audience may not be longer than 1024 bytes")
	}
	if req.GetNamespace() == "" || req.GetPodName() == "" || req.GetPodUid() == "" || name == "" {
		return invalid("spec.boundObjectRef", "a node's token names its pod's namespace, name and uid and its serviceaccount")
	}
	return nil
}

// nodeForbidden is the node authorizer's refusal of node's TokenRequest
// for the ServiceAccount ns/name.
func nodeForbidden(node, ns, name, why string) *corev1.Status {
	return stage.Failure(403, eventsv1.ReasonForbidden, "serviceaccounts", name,
		"serviceaccounts %q is forbidden: User \"system:node:%s\" cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace %q: %s",
		name, node, ns, why)
}

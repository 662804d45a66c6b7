package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// TokenRequester is an optional NodeStore capability: asking the api
// stage for a bound token of pod's ServiceAccount (pod's
// spec.serviceAccountName), bound to pod, for a projected
// serviceAccountToken source — what kubelet's token manager asks
// kube-apiserver's TokenRequest API. It returns the token and its expiry;
// a refusal is an error with the api stage's message. Without it a pod
// with a serviceAccountToken source fails to mount (FailedMount).
type TokenRequester interface {
	RequestServiceAccountToken(ctx context.Context, pod *corev1.Pod, audience string, expirationSeconds int64) (token string, expiry time.Time, err error)
}

// ErrNoTokenRequester: the node's store cannot ask for tokens.
var ErrNoTokenRequester = errors.New("nodeagent: this node cannot request ServiceAccount tokens")

// Token refresh, as kubelet's token manager (pkg/kubelet/token): a token
// is requested again once it is older than TokenRefreshFraction of its
// lifetime or older than TokenMaxAge, at the first volume sync after that
// (Config.SyncPeriod); until then the cached token is projected unchanged.
const (
	TokenRefreshFraction = 0.8
	TokenMaxAge          = 24 * time.Hour
)

// podToken is a token the worker holds for key (expiration and
// audience), issued at (the node's clock) and valid until expiry. token
// is the one copy of it the node holds: the bytes projected into the
// volume are these, never written to (a refresh replaces the slice).
type podToken struct {
	key            string
	token          []byte
	issued, expiry time.Time
}

// needsRefresh is kubelet's requiresRefresh.
func (t podToken) needsRefresh(now time.Time) bool {
	age := now.Sub(t.issued)
	ttl := t.expiry.Sub(t.issued)
	return age > time.Duration(float64(ttl)*TokenRefreshFraction) || age > TokenMaxAge || !now.Before(t.expiry)
}

// serviceAccountToken is the token of a serviceAccountToken source: the
// one the worker holds for its audience and expiration, or a new one
// when that needs a refresh. A failed refresh keeps projecting a token
// that is still valid (as kubelet does), and fails once none is.
func (w *worker) serviceAccountToken(ctx context.Context, src *corev1.ServiceAccountTokenProjection) ([]byte, error) {
	exp := src.GetExpirationSeconds()
	if src.ExpirationSeconds == nil {
		exp = int64(time.Hour / time.Second) // Kubernetes' default
	}
	key := strconv.FormatInt(exp, 10) + "/" + src.GetAudience()
	now := w.d.clock.Now()
	var cur podToken
	i := slices.IndexFunc(w.tokens, func(t podToken) bool { return t.key == key })
	ok := i >= 0
	if ok {
		cur = w.tokens[i]
	}
	if ok && !cur.needsRefresh(now) {
		return cur.token, nil
	}
	req, can := w.d.volumes.(TokenRequester)
	if !can {
		return nil, fmt.Errorf("failed to fetch token: %w", ErrNoTokenRequester)
	}
	tok, expiry, err := req.RequestServiceAccountToken(ctx, w.pod, src.GetAudience(), exp)
	if err != nil {
		if ok && now.Before(cur.expiry) {
			w.d.log.Warn("token refresh failed; the current token is kept", "pod", podKey(w.pod), "err", err)
			return cur.token, nil
		}
		return nil, fmt.Errorf("failed to fetch token: %w", err)
	}
	t := podToken{key: key, token: []byte(tok), issued: now, expiry: expiry}
	if ok {
		w.tokens[i] = t
	} else {
		w.tokens = append(w.tokens, t)
	}
	return t.token, nil
}

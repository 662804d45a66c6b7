package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// stillTime is a Clock reading a time the test sets.
type stillTime struct {
	RealClock
	now *time.Time
}

func (c stillTime) Now() time.Time { return *c.now }

// tokenSource is a mapSource that also answers token requests (a
// unit-test fake of the api stage): token-<n>, valid expirationSeconds
// from *now, or fail's error.
type tokenSource struct {
	mapSource
	now  *time.Time
	asks []string // "audience/expirationSeconds" of each request
	fail error
}

func (s *tokenSource) RequestServiceAccountToken(_ context.Context, pod *corev1.Pod, audience string, exp int64) (string, time.Time, error) {
	s.asks = append(s.asks, fmt.Sprintf("%s/%d", audience, exp))
	if s.fail != nil {
		return "", time.Time{}, s.fail
	}
	return fmt.Sprintf("token-%d-%s", len(s.asks), pod.GetMetadata().GetName()), s.now.Add(time.Duration(exp) * time.Second), nil
}

func tokenWorker(src *corev1.ProjectedVolumeSource, ts *tokenSource) *worker {
	w := projectedWorker(src)
	if ts != nil {
		ts.mapSource = w.d.volumes.(mapSource)
		w.d.volumes = ts
	}
	w.d.clock = stillTime{now: ts.now}
	w.d.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	return w
}

// A serviceAccountToken source is a file of the token at its path, of
// the volume's defaultMode (as kubelet's projection), for the source's
// audience and expirationSeconds (3600 when unset); the token is asked
// for once and projected unchanged until it needs a refresh (kubelet's
// token manager: older than 80 % of its lifetime or than 24 h); a failed
// refresh keeps a valid token, and without a token the mount fails with
// kubelet's "failed to fetch token".
func TestServiceAccountTokenProjection(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ts := &tokenSource{now: &now}
	w := tokenWorker(&corev1.ProjectedVolumeSource{DefaultMode: mode(0o440), Sources: []*corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "sa/token"}},
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "vault-token", Audience: "vault", ExpirationSeconds: i64(600)}},
		{ConfigMap: &corev1.ConfigMapProjection{Name: "app", Items: []*corev1.KeyToPath{{Key: "colour", Path: "colour"}}}},
	}}, ts)
	files := func() map[string][]byte {
		t.Helper()
		vols, err := w.resolveVolumes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"sa/token", "vault-token"} {
			if vols[0].Modes[p] != 0o440 {
				t.Errorf("%s mode %o, want the defaultMode 0440", p, vols[0].Modes[p])
			}
		}
		return vols[0].Files
	}
	got := files()
	if string(got["sa/token"]) != "token-1-web" || string(got["vault-token"]) != "token-2-web" || string(got["colour"]) != "blue" {
		t.Fatalf("files %q", got)
	}
	if want := []string{"/3600", "vault/600"}; strings.Join(ts.asks, " ") != strings.Join(want, " ") {
		t.Errorf("requests %v, want %v", ts.asks, want)
	}

	now = now.Add(480 * time.Second) // 80 % of vault's 600 s: not past it
	if got := files(); string(got["vault-token"]) != "token-2-web" || len(ts.asks) != 2 {
		t.Errorf("at 80 %%: vault-token %q after %d requests, want token-2 unchanged", got["vault-token"], len(ts.asks))
	}
	now = now.Add(time.Second)
	if got := files(); string(got["vault-token"]) != "token-3-web" || string(got["sa/token"]) != "token-1-web" {
		t.Errorf("past 80 %% of vault's lifetime: %q, want vault-token refreshed alone", got)
	}

	ts.fail = errors.New(`serviceaccounts "default" is forbidden`)
	now = now.Add(481 * time.Second) // vault-token past 80 % again, still valid
	if got := files(); string(got["vault-token"]) != "token-3-web" || len(ts.asks) != 4 {
		t.Errorf("a failed refresh: vault-token %q after %d requests, want the valid token kept after a 4th", got["vault-token"], len(ts.asks))
	}
	now = now.Add(120 * time.Second) // vault-token expired
	if _, err := w.resolveVolumes(context.Background()); err == nil || !strings.Contains(err.Error(), `failed to fetch token: serviceaccounts "default" is forbidden`) {
		t.Errorf("no valid token: %v, want kubelet's failed to fetch token", err)
	}

	bare := tokenWorker(&corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}, &tokenSource{now: &now})
	bare.d.volumes = bare.d.volumes.(*tokenSource).mapSource // a store that cannot ask for tokens
	if _, err := bare.resolveVolumes(context.Background()); !errors.Is(err, ErrNoTokenRequester) {
		t.Errorf("a node without a TokenRequester: %v, want ErrNoTokenRequester", err)
	}
}

// needsRefresh is kubelet's requiresRefresh: past 80 % of the lifetime,
// or 24 h old whatever the lifetime.
func TestTokenNeedsRefresh(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		ttl, age time.Duration
		want     bool
	}{
		{10 * time.Minute, 8 * time.Minute, false},
		{10 * time.Minute, 8*time.Minute + time.Second, true},
		{time.Hour, 48 * time.Minute, false},
		{time.Hour, 49 * time.Minute, true},
		{100 * time.Hour, 24 * time.Hour, false},
		{100 * time.Hour, 24*time.Hour + time.Second, true},
	} {
		tok := podToken{issued: t0, expiry: t0.Add(tc.ttl)}
		if got := tok.needsRefresh(t0.Add(tc.age)); got != tc.want {
			t.Errorf("ttl %s age %s: refresh %v, want %v", tc.ttl, tc.age, got, tc.want)
		}
	}
}

func i64(v int64) *int64 { return &v }

package nodeagent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/nodeagenttest"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// tokenStore is the fake store answering token requests as the api stage
// would (token-<n>, valid expirationSeconds from clock's now), counting
// them and the volume syncs (reads of the ConfigMap beside the token).
type tokenStore struct {
	*nodeagenttest.Store
	clock *nodeagenttest.FakeClock

	mu          sync.Mutex
	tokens, cms int
}

var _ nodeagent.TokenRequester = (*tokenStore)(nil)

func (s *tokenStore) RequestServiceAccountToken(_ context.Context, pod *corev1.Pod, _ string, exp int64) (string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens++
	return fmt.Sprintf("token-%d", s.tokens), s.clock.Now().Add(time.Duration(exp) * time.Second), nil
}

func (s *tokenStore) GetConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	s.mu.Lock()
	s.cms++
	s.mu.Unlock()
	return s.Store.GetConfigMap(ctx, ns, name)
}

func (s *tokenStore) counts() (tokens, syncs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens, s.cms
}

// A projected serviceAccountToken is refreshed as kubelet refreshes it,
// on the volume sync path (Config.SyncPeriod, kubelet's 1 minute, on a
// fake clock): a 10-minute token is projected unchanged at every sync up
// to 8 minutes (80 %) and requested again at the first sync past them;
// the new token is mounted into the running pod.
func TestServiceAccountTokenRefresh(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := nodeagenttest.NewFakeClock(t0)
	var st *tokenStore
	e := fakeClockEnv(t, clock, func(s *nodeagenttest.Store) nodeagent.NodeStore {
		st = &tokenStore{Store: s, clock: clock}
		return st
	})
	rt := e.rt
	st.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "app"}, Data: map[string]string{"k": "v"}})
	p := newPod("satoken", func(p *corev1.Pod) {
		p.Spec.Volumes = []*corev1.Volume{{Name: "token", Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: proto64(600)}},
			{ConfigMap: &corev1.ConfigMapProjection{Name: "app"}},
		}}}}
	})
	e.bind(p)
	e.waitStatus(p.Metadata.Uid, "Running and Ready", runningReady)
	want := func(token string, mounts int) {
		t.Helper()
		if err := rt.WaitVolume(e.ctx(), p.Metadata.Uid, "token", func(files map[string][]byte, n int) bool {
			return string(files["token"]) == token && n == mounts
		}); err != nil {
			t.Fatalf("volume token: want %s after %d mounts: %v", token, mounts, err)
		}
	}
	want("token-1", 1)
	syncAfter := func(d time.Duration) {
		t.Helper()
		_, before := st.counts()
		deadline := time.Now().Add(waitFor)
		for _, n := st.counts(); n == before; _, n = st.counts() {
			if time.Now().After(deadline) {
				t.Fatalf("no volume sync after %s of fake time", clock.Now().Sub(t0))
			}
			clock.Advance(d)
			d = 0
			time.Sleep(time.Millisecond)
		}
	}
	for range 8 { // syncs at 1..8 minutes: not past 80 % of 10 minutes
		syncAfter(time.Minute)
		if tokens, _ := st.counts(); tokens != 1 {
			t.Fatalf("%d token requests at %s, want the first token kept", tokens, clock.Now().Sub(t0))
		}
	}
	syncAfter(time.Minute)
	want("token-2", 2)
}

func proto64(v int64) *int64 { return &v }

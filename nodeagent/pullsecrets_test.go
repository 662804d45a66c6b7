package nodeagent_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// secretPuller is the simulated runtime with nodeagent.SecretPuller: it
// records the Secrets each pull was given.
type secretPuller struct {
	*sim.Runtime
	mu    sync.Mutex
	pulls [][]string // Secret names per pull
}

func (r *secretPuller) PullImageWithSecrets(ctx context.Context, pod *corev1.Pod, image, policy string, secrets []*corev1.Secret) (nodeagent.ImageRef, error) {
	var names []string
	for _, s := range secrets {
		names = append(names, s.GetMetadata().GetName())
	}
	r.mu.Lock()
	r.pulls = append(r.pulls, names)
	r.mu.Unlock()
	return r.Runtime.PullImage(ctx, pod, image, policy)
}

// A pod's imagePullSecrets reach a SecretPuller runtime's pull as the
// Secrets the agent could read from the pod's namespace; one that cannot
// be read is left out with kubelet's Warning FailedToRetrieveImagePullSecret
// and the pull goes on.
func TestImagePullSecretsReachThePull(t *testing.T) {
	e := newEnv(t)
	rt := &secretPuller{Runtime: e.rt}
	e.useRuntime(rt)
	e.store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "regcred"}, Type: "kubernetes.io/dockerconfigjson"})
	e.store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Namespace: "other", Name: "elsewhere"}, Type: "kubernetes.io/dockerconfigjson"})
	p := newPod("pull", func(p *corev1.Pod) {
		p.Spec.ImagePullSecrets = []*corev1.LocalObjectReference{{Name: "regcred"}, {Name: "missing"}, {Name: "elsewhere"}}
	})
	e.bind(p)
	envs := e.waitReady(p.Metadata.Uid)
	rt.mu.Lock()
	pulls := slices.Clone(rt.pulls)
	rt.mu.Unlock()
	if len(pulls) != 1 || !slices.Equal(pulls[0], []string{"regcred"}) {
		t.Errorf("pulls got Secrets %q, want one pull with [regcred]", pulls)
	}
	if !hasRecord(envs, "Warning", "FailedToRetrieveImagePullSecret",
		"Unable to retrieve some image pull secrets (missing, elsewhere); attempting to pull the image may not succeed.") {
		t.Errorf("no FailedToRetrieveImagePullSecret event: %v", records(envs))
	}
}

package linux_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/container/containertest"
	"github.com/podflow/podflow/nodeagent/linux/image"
	"github.com/podflow/podflow/nodeagent/linux/image/imagebuild"
	"github.com/podflow/podflow/nodeagent/linux/image/imagetest"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// imagePullSecrets on the kernel, against a registry behind basic auth: a
// pod without the Secret's credentials ends in ErrImagePull (the Failed
// event naming UNAUTHORIZED) then ImagePullBackOff; once its
// kubernetes.io/dockerconfigjson Secret exists in the pod's namespace
// the next pull has its credentials and the pod runs.
func TestImagePullSecretsOnTheKernel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	private := imagetest.NewRegistry(t)
	img, err := imagebuild.Busybox(context.Background(), containertest.Busybox)
	if err != nil {
		t.Fatal(err)
	}
	private.Push(t, "team/busybox:1", img)
	private.RequireBasicAuth("puller", "s3cret")
	a, store, pub := runAgent(t, e)

	ref := private.Addr + "/team/busybox:1"
	pd := newPod(e.cfg.NodeName, "private", "sleep", "3600")
	pd.Spec.Containers[0].Image = ref
	pd.Spec.ImagePullSecrets = []*corev1.LocalObjectReference{{Name: "regcred"}}
	ctx, uid, wait := bindPod(t, a, store, pub, pd)
	waiting := func(reason string) func([]*eventsv1.Envelope) bool {
		return func(envs []*eventsv1.Envelope) bool {
			for _, env := range envs {
				for _, cs := range env.GetPodStatusReport().GetStatus().GetContainerStatuses() {
					if cs.GetState().GetWaiting().GetReason() == reason {
						return true
					}
				}
			}
			return false
		}
	}
	wait("ErrImagePull", waiting("ErrImagePull"))
	wait("ImagePullBackOff", waiting("ImagePullBackOff"))
	envs := pub.Pod(uid)
	for reason, msg := range map[string]string{
		"FailedToRetrieveImagePullSecret": "Unable to retrieve some image pull secrets (regcred); attempting to pull the image may not succeed.",
		"Failed":                          `Failed to pull image "` + ref + `": `,
		"BackOff":                         `Back-off pulling image "` + ref + `"`,
	} {
		if !hasEvent(envs, reason, msg) {
			t.Errorf("no %s event %q", reason, msg)
		}
	}
	if !hasEvent(envs, "Failed", "UNAUTHORIZED") {
		t.Error("the Failed event does not name UNAUTHORIZED")
	}

	auth := base64.StdEncoding.EncodeToString([]byte("puller:s3cret"))
	store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "regcred", Namespace: "default"}, Type: image.SecretTypeDockerConfigJSON,
		Data: map[string][]byte{image.DockerConfigJSONKey: []byte(`{"auths":{"` + private.Addr + `":{"auth":"` + auth + `"}}}`)}})
	wait("PodReady", func(envs []*eventsv1.Envelope) bool { return count(envs, "PodReady") > 0 })
	if !hasEvent(pub.Pod(uid), "Pulled", `Successfully pulled image "`+ref+`"`) {
		t.Error("no Pulled event")
	}
	if err := a.HandlePodDelete(ctx, pd, time.Second); err != nil {
		t.Fatal(err)
	}
	wait("PodDeleted", func(envs []*eventsv1.Envelope) bool { return count(envs, "PodDeleted") > 0 })
}

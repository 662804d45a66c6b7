package nodeagent

import (
	"context"
	"fmt"
	"strings"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/vt"
)

// podImages is the image of each container of a pod update, by name.
type podImages struct{ inits, apps map[string]string }

func imagesOf(pod *corev1.Pod) podImages {
	im := podImages{inits: map[string]string{}, apps: map[string]string{}}
	for _, c := range pod.GetSpec().GetInitContainers() {
		im.inits[c.GetName()] = c.GetImage()
	}
	for _, c := range pod.GetSpec().GetContainers() {
		im.apps[c.GetName()] = c.GetImage()
	}
	return im
}

// onImages takes new images into the containers' specs: from now on each
// container starts with its new image, with fresh back-offs (kubelet's
// back-off keys include the image). A running container whose image
// changed is restarted by the next sync (restartChanged).
func (w *worker) onImages(im podImages) {
	for _, c := range w.all() {
		by := im.apps
		if c.init {
			by = im.inits
		}
		img, ok := by[c.spec.GetName()]
		if !ok || img == "" || img == c.spec.GetImage() {
			continue
		}
		spec := vt.Clone(c.spec)
		spec.Image = img
		c.spec = spec
		c.crash, c.pull = nil, nil
		c.inBackoff = false
	}
}

// restartChanged kills each running container whose instance runs another
// image than its spec names, as kubelet's computePodActions does for a
// container whose spec hash changed: a Killing Event "Container x
// definition changed, will be restarted", a stop as any kill (preStop,
// SIGTERM, SIGKILL after the pod's terminationGracePeriodSeconds), and a
// start with the new image whatever the restartPolicy (restartCount + 1).
// Containers that finished are not started again; the others are not
// touched. It reports whether it killed any.
func (w *worker) restartChanged(ctx context.Context) bool {
	var changed []*ctr
	for _, c := range w.all() {
		if c.running() && c.runImage != "" && c.runImage != c.spec.GetImage() {
			changed = append(changed, c)
			w.rep.Normal(eventsv1.ReasonKilling, fmt.Sprintf("Container %s definition changed, will be restarted", c.spec.GetName()))
		}
	}
	if len(changed) == 0 {
		return false
	}
	w.kill(ctx, changed, gracePeriod(w.pod, &w.d.cfg), func(c *ctr, ex ContainerExit) { w.recordExit(ctx, c, ex) })
	return true
}

// pullImage pulls image for the pod, with the credentials of its
// imagePullSecrets when the runtime is a SecretPuller. As kubelet's
// getPullSecretsForPod, a Secret that cannot be read is left out with a
// Warning FailedToRetrieveImagePullSecret and the pull goes on.
func (w *worker) pullImage(ctx context.Context, image, policy string) (ImageRef, error) {
	sp, ok := w.d.rt.(SecretPuller)
	refs := w.pod.GetSpec().GetImagePullSecrets()
	if !ok || len(refs) == 0 {
		return w.d.rt.PullImage(ctx, w.pod, image, policy)
	}
	var secrets []*corev1.Secret
	var failed []string
	for _, r := range refs {
		if r.GetName() == "" {
			continue
		}
		s, err := w.d.volumes.GetSecret(ctx, w.pod.GetMetadata().GetNamespace(), r.GetName())
		if err != nil {
			if ctx.Err() != nil {
				return ImageRef{}, ctx.Err()
			}
			w.d.log.Info("Unable to retrieve pull secret, the image pull may not succeed.", "pod", podRef(w.pod), "secret", r.GetName(), "err", err)
			failed = append(failed, r.GetName())
			continue
		}
		secrets = append(secrets, s)
	}
	if len(failed) > 0 {
		w.rep.Warn(reasonFailedToRetrieveImagePullSecret, fmt.Sprintf(
			"Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(failed, ", ")))
	}
	return sp.PullImageWithSecrets(ctx, w.pod, image, policy, secrets)
}

// reasonFailedToRetrieveImagePullSecret is kubelet's event reason
// (events.FailedToRetrieveImagePullSecret).
const reasonFailedToRetrieveImagePullSecret = "FailedToRetrieveImagePullSecret"

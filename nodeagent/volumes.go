package nodeagent

import (
	"context"
	"errors"
	"maps"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// volumeSource is what a worker reads of the store: the ConfigMaps and
// Secrets its pod's volumes and its containers' environment name. NodeStore is one. Missing objects are
// errors matching ErrNotFound.
type volumeSource interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// resolveVolumes reads the ConfigMaps and Secrets the pod's volumes refer to.
func (w *worker) resolveVolumes(ctx context.Context) ([]VolumeData, error) {
	ns := w.pod.GetMetadata().GetNamespace()
	var out []VolumeData
	for _, v := range w.pod.GetSpec().GetVolumes() {
		vd := VolumeData{Volume: v}
		switch {
		case v.GetConfigMap() != nil:
			src := v.GetConfigMap()
			cm, err := w.d.volumes.GetConfigMap(ctx, ns, src.GetName())
			switch {
			case errors.Is(err, ErrNotFound) && src.GetOptional():
			case errors.Is(err, ErrNotFound):
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : configmap %q not found", v.GetName(), src.GetName())
			case err != nil:
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : get configmap %q: %w", v.GetName(), src.GetName(), err)
			default:
				data := map[string][]byte{}
				for k, s := range cm.GetData() {
					data[k] = []byte(s)
				}
				maps.Copy(data, cm.GetBinaryData())
				vd.Files = project(data, src.GetItems())
			}
		case v.GetSecret() != nil:
			src := v.GetSecret()
			s, err := w.d.volumes.GetSecret(ctx, ns, src.GetSecretName())
			switch {
			case errors.Is(err, ErrNotFound) && src.GetOptional():
			case errors.Is(err, ErrNotFound):
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : secret %q not found", v.GetName(), src.GetSecretName())
			case err != nil:
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : get secret %q: %w", v.GetName(), src.GetSecretName(), err)
			default:
				vd.Files = project(s.GetData(), src.GetItems())
			}
		}
		out = append(out, vd)
	}
	return out, nil
}

func project(data map[string][]byte, items []*corev1.KeyToPath) map[string][]byte {
	if len(items) == 0 {
		return data
	}
	out := make(map[string][]byte, len(items))
	for _, it := range items {
		if d, ok := data[it.GetKey()]; ok {
			out[it.GetPath()] = d
		}
	}
	return out
}

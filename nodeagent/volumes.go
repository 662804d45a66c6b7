package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// volumeSource is what a worker reads of the store: the ConfigMaps and
// Secrets its pod's volumes and its containers' environment name. NodeStore is one. Missing objects are
// errors matching ErrNotFound.
type volumeSource interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// resolveVolumes reads the ConfigMaps and Secrets the pod's volumes refer
// to and resolves the downwardAPI volumes' items.
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
		case v.GetDownwardApi() != nil:
			files, err := w.downwardAPIFiles(v.GetDownwardApi())
			if err != nil {
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : %w", v.GetName(), err)
			}
			vd.Files = files
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

// downwardAPIFiles is kubelet's downwardapi.CollectData: each item's path
// (validated as the atomic writer validates it) and value, resolved as the
// env downward API resolves it. A volume's fieldRef selects only metadata
// (name, namespace, uid, labels, annotations, one label or annotation);
// a resourceFieldRef names its container. Every bad item is reported.
func (w *worker) downwardAPIFiles(src *corev1.DownwardAPIVolumeSource) (map[string][]byte, error) {
	out := make(map[string][]byte, len(src.GetItems()))
	var errs []error
	for _, it := range src.GetItems() {
		if err := ValidateVolumePath(it.GetPath()); err != nil {
			errs = append(errs, err)
			continue
		}
		var v string
		var err error
		switch {
		case it.GetFieldRef() != nil:
			path := it.GetFieldRef().GetFieldPath()
			if !strings.HasPrefix(path, "metadata.") {
				err = fmt.Errorf("unsupported fieldPath: %s", path)
				break
			}
			v, err = w.podField(path)
		case it.GetResourceFieldRef() != nil:
			v, err = w.resourceField(nil, it.GetResourceFieldRef())
		default:
			err = fmt.Errorf("item %q: neither fieldRef nor resourceFieldRef", it.GetPath())
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[filepath.Clean(it.GetPath())] = []byte(v)
	}
	return out, errors.Join(errs...)
}

// ValidateVolumePath is the atomic writer's validatePath (kubelet
// pkg/volume/util/atomic_writer.go): a file path inside a projected
// volume is relative, holds no ".." element, does not begin with "..",
// and is within the kernel's limits.
func ValidateVolumePath(p string) error {
	if p == "" {
		return fmt.Errorf("invalid path: must not be empty: %q", p)
	}
	if filepath.IsAbs(p) {
		return fmt.Errorf("invalid path: must be relative path: %s", p)
	}
	if len(p) > 4096 {
		return errors.New("invalid path: must be less than or equal to 4096 characters")
	}
	segs := strings.Split(p, "/")
	for _, seg := range segs {
		if seg == ".." {
			return fmt.Errorf("invalid path: must not contain '..': %s", p)
		}
		if len(seg) > 255 {
			return errors.New("invalid path: filenames must be less than or equal to 255 characters")
		}
	}
	if strings.HasPrefix(segs[0], "..") {
		return fmt.Errorf("invalid path: must not start with '..': %s", p)
	}
	return nil
}

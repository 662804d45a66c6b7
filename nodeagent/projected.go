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

// DefaultProjectedMode is the mode of a projected volume's files when
// neither the item nor the volume names one (Kubernetes defaults
// defaultMode to 0644).
const DefaultProjectedMode = 0o644

// projectedFiles is kubelet's projected plugin collectData: each source
// in turn adds its files to one payload, with the item's mode or the
// volume's defaultMode. A missing ConfigMap or Secret is an error unless
// the source is optional; a key its items name but it lacks is an error
// unless optional (MakePayload). Every source's error is reported, as
// kubelet's aggregate words them ("[a, b]" for more than one). A
// serviceAccountToken source is the pod's token (satoken.go), a file of
// the volume's defaultMode.
func (w *worker) projectedFiles(ctx context.Context, src *corev1.ProjectedVolumeSource) (map[string][]byte, map[string]uint32, error) {
	def := uint32(DefaultProjectedMode)
	if src.DefaultMode != nil {
		def = uint32(*src.DefaultMode) & 0o777
	}
	ns := w.pod.GetMetadata().GetNamespace()
	files, modes := map[string][]byte{}, map[string]uint32{}
	add := func(path string, data []byte, mode *int32) {
		files[path], modes[path] = data, def
		if mode != nil {
			modes[path] = uint32(*mode) & 0o777
		}
	}
	var errs []error
	for _, s := range src.GetSources() {
		switch {
		case s.GetConfigMap() != nil:
			p := s.GetConfigMap()
			data, err := w.configMapData(ctx, ns, p.GetName(), p.GetOptional())
			if err == nil {
				err = makePayload(data, p.GetItems(), p.GetOptional(), "configmap references non-existent config key: %s", add)
			}
			if err != nil {
				errs = append(errs, err)
			}
		case s.GetSecret() != nil:
			p := s.GetSecret()
			data, err := w.secretData(ctx, ns, p.GetName(), p.GetOptional())
			if err == nil {
				err = makePayload(data, p.GetItems(), p.GetOptional(), "references non-existent secret key: %s", add)
			}
			if err != nil {
				errs = append(errs, err)
			}
		case s.GetDownwardApi() != nil:
			dsrc := &corev1.DownwardAPIVolumeSource{Items: s.GetDownwardApi().GetItems()}
			dfiles, err := w.downwardAPIFiles(dsrc)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, it := range dsrc.GetItems() {
				if p := filepath.Clean(it.GetPath()); dfiles[p] != nil {
					add(p, dfiles[p], it.Mode)
				}
			}
		case s.GetServiceAccountToken() != nil:
			p := s.GetServiceAccountToken()
			if err := ValidateVolumePath(p.GetPath()); err != nil {
				errs = append(errs, err)
				continue
			}
			tok, err := w.serviceAccountToken(ctx, p)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			add(filepath.Clean(p.GetPath()), tok, nil)
		default:
			errs = append(errs, errors.New("projected volume source with no configMap, secret, downwardAPI or serviceAccountToken"))
		}
	}
	if err := aggregate(errs); err != nil {
		return nil, nil, err
	}
	return files, modes, nil
}

// configMapData is the ConfigMap's data and binaryData; an optional one
// that does not exist is empty.
func (w *worker) configMapData(ctx context.Context, ns, name string, optional bool) (map[string][]byte, error) {
	cm, err := w.d.volumes.GetConfigMap(ctx, ns, name)
	switch {
	case errors.Is(err, ErrNotFound) && optional:
		return nil, nil
	case errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("configmap %q not found", name)
	case err != nil:
		return nil, fmt.Errorf("get configmap %q: %w", name, err)
	}
	data := map[string][]byte{}
	for k, s := range cm.GetData() {
		data[k] = []byte(s)
	}
	maps.Copy(data, cm.GetBinaryData())
	return data, nil
}

// secretData is the Secret's data; an optional one that does not exist
// is empty.
func (w *worker) secretData(ctx context.Context, ns, name string, optional bool) (map[string][]byte, error) {
	s, err := w.d.volumes.GetSecret(ctx, ns, name)
	switch {
	case errors.Is(err, ErrNotFound) && optional:
		return nil, nil
	case errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("secret %q not found", name)
	case err != nil:
		return nil, fmt.Errorf("get secret %q: %w", name, err)
	}
	return s.GetData(), nil
}

// makePayload is kubelet's configmap/secret MakePayload: without items
// every key is a file; with items each named key is one, at its path, and
// a missing key is an error (missingKey, worded as kubelet's) unless the
// source is optional.
func makePayload(data map[string][]byte, items []*corev1.KeyToPath, optional bool, missingKey string, add func(string, []byte, *int32)) error {
	if len(items) == 0 {
		for k, d := range data {
			add(k, d, nil)
		}
		return nil
	}
	for _, it := range items {
		d, ok := data[it.GetKey()]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf(missingKey, it.GetKey())
		}
		add(it.GetPath(), d, it.Mode)
	}
	return nil
}

// aggregate words errors as k8s.io/apimachinery's utilerrors.NewAggregate:
// nil for none, the error itself for one, "[a, b]" for more.
func aggregate(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New("[" + strings.Join(msgs, ", ") + "]")
}

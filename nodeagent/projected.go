package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"

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
// that does not exist is empty. It reads the ConfigMap without a copy
// when the store can (SharedConfigMapGetter): it only reads it.
func (w *worker) configMapData(ctx context.Context, ns, name string, optional bool) (map[string][]byte, error) {
	get := w.d.volumes.GetConfigMap
	if sg, ok := w.d.volumes.(SharedConfigMapGetter); ok {
		get = sg.GetSharedConfigMap
	}
	cm, err := get(ctx, ns, name)
	switch {
	case errors.Is(err, ErrNotFound) && optional:
		return nil, nil
	case errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("configmap %q not found", name)
	case err != nil:
		return nil, fmt.Errorf("get configmap %q: %w", name, err)
	}
	md := cm.GetMetadata()
	id := cmIdentity{uid: md.GetUid(), rv: md.GetResourceVersion()}
	if data, ok := configMapBytes.get(ns+"/"+name, id); ok {
		return data, nil
	}
	data := map[string][]byte{}
	for k, s := range cm.GetData() {
		data[k] = []byte(s)
	}
	maps.Copy(data, cm.GetBinaryData())
	configMapBytes.put(ns+"/"+name, id, data)
	return maps.Clone(data), nil
}

// configMapBytes is, for each ConfigMap the process's agents mounted, its
// latest version's data as bytes: every pod that projects the same
// ConfigMap (kube-root-ca.crt: every pod with a token volume) shares one
// copy of its files instead of holding its own, about 1.1 KB a pod for
// the CA certificate. The bytes are shared, so read-only, as
// VolumeData.Files says; each caller gets its own map. A ConfigMap read
// without a uid or resourceVersion (a test's fake store) is not kept.
var configMapBytes = &cmBytesCache{items: map[string]cmBytes{}}

// cmBytesMax bounds configMapBytes: past it the cache starts afresh. The
// ConfigMaps a node's pods reference are far fewer, but the sim's
// thousands of nodes share the process.
const cmBytesMax = 4096

// cmIdentity is a ConfigMap's version: its data is the same for the same
// uid and resourceVersion.
type cmIdentity struct{ uid, rv string }

type cmBytes struct {
	id   cmIdentity
	data map[string][]byte
}

type cmBytesCache struct {
	mu    sync.Mutex
	items map[string]cmBytes // by namespace/name
}

func (c *cmBytesCache) get(key string, id cmIdentity) (map[string][]byte, bool) {
	if id.uid == "" || id.rv == "" {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok || e.id != id {
		return nil, false
	}
	return maps.Clone(e.data), true
}

func (c *cmBytesCache) put(key string, id cmIdentity, data map[string][]byte) {
	if id.uid == "" || id.rv == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[key]; !ok && len(c.items) >= cmBytesMax {
		clear(c.items)
	}
	c.items[key] = cmBytes{id: id, data: data}
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

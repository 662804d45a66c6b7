package nodeagent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// volumeSource is what a worker reads of the store: the ConfigMaps and
// Secrets its pod's volumes and its containers' environment name. NodeStore is one. Missing objects are
// errors matching ErrNotFound.
type volumeSource interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// SharedConfigMapGetter is an optional NodeStore capability: a ConfigMap
// as GetConfigMap reads it, but possibly shared with other readers
// instead of a copy of the caller's own, so read-only. A worker reads the
// ConfigMaps its pod's volumes project this way when its store has it:
// kube-root-ca.crt, which every pod with a token volume projects, at the
// pod's start and at every volume re-sync.
type SharedConfigMapGetter interface {
	GetSharedConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

// resolveVolumes reads the ConfigMaps and Secrets the pod's volumes refer
// to and resolves the downwardAPI volumes' items.
func (w *worker) resolveVolumes(ctx context.Context) ([]VolumeData, error) {
	ns := w.pod.GetMetadata().GetNamespace()
	var out []VolumeData
	for _, v := range w.pod.GetSpec().GetVolumes() {
		vd := VolumeData{Volume: v}
		switch {
		case v.GetEmptyDir().GetMedium() == "Memory":
			vd.MemorySize = emptyDirMemorySize(w.pod, v.GetEmptyDir(), w.allocatableMemory())
		case v.GetConfigMap() != nil:
			src := v.GetConfigMap()
			data, err := w.configMapData(ctx, ns, src.GetName(), src.GetOptional())
			if err != nil {
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : %w", v.GetName(), err)
			}
			if data != nil {
				if vd.Files, err = project(data, src.GetItems(), src.GetOptional(), "configmap references non-existent config key: %s"); err != nil {
					return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : %w", v.GetName(), err)
				}
			}
		case v.GetSecret() != nil:
			src := v.GetSecret()
			data, err := w.secretData(ctx, ns, src.GetSecretName(), src.GetOptional())
			if err != nil {
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : %w", v.GetName(), err)
			}
			if data != nil {
				if vd.Files, err = project(data, src.GetItems(), src.GetOptional(), "references non-existent secret key: %s"); err != nil {
					return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : %w", v.GetName(), err)
				}
			}
		case v.GetDownwardApi() != nil:
			files, err := w.downwardAPIFiles(v.GetDownwardApi())
			if err != nil {
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : %w", v.GetName(), err)
			}
			vd.Files = files
		case v.GetProjected() != nil:
			files, modes, err := w.projectedFiles(ctx, v.GetProjected())
			if err != nil {
				return nil, Errorf(CodeMount, "MountVolume.SetUp failed for volume %q : %w", v.GetName(), err)
			}
			vd.Files, vd.Modes = files, modes
		case v.GetCsi() != nil:
			return nil, csiMountError(v)
		}
		if v.GetSecret() != nil || v.GetDownwardApi() != nil || v.GetProjected() != nil {
			// kubelet wraps these in a memory emptyDir (wrappedVolumeSpec),
			// sized as any memory emptyDir without a sizeLimit.
			vd.MemorySize = emptyDirMemorySize(w.pod, nil, w.allocatableMemory())
		}
		out = append(out, vd)
	}
	return out, nil
}

// project is kubelet's MakePayload of a configMap or secret volume: every
// key, or with items each item's key at its path. A key the items name
// that data lacks fails the mount with missingKey (kubelet's words)
// unless the volume is optional.
func project(data map[string][]byte, items []*corev1.KeyToPath, optional bool, missingKey string) (map[string][]byte, error) {
	if len(items) == 0 {
		return data, nil
	}
	out := make(map[string][]byte, len(items))
	for _, it := range items {
		d, ok := data[it.GetKey()]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf(missingKey, it.GetKey())
		}
		out[it.GetPath()] = d
	}
	return out, nil
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

// synced reports whether v's files come from the store or the pod and are
// re-synced while the pod runs: configMap, secret, downwardAPI and
// projected volumes.
func synced(v *corev1.Volume) bool {
	return v.GetConfigMap() != nil || v.GetSecret() != nil || v.GetDownwardApi() != nil || v.GetProjected() != nil
}

// nextVolumeSync is when the pod's volumes are next re-synced: a
// SyncPeriod from now, or never when it has no synced volume.
func (w *worker) nextVolumeSync(now time.Time) time.Time {
	w.volSync = time.Time{}
	if slices.ContainsFunc(w.pod.GetSpec().GetVolumes(), synced) {
		w.volSync = now.Add(w.d.cfg.SyncPeriod)
	}
	return w.volSync
}

// onMeta takes a pod update's metadata as kubelet's pod worker does: of
// what may change on a running pod, the labels and annotations are what
// the worker shows (downwardAPI volumes, and the environment of
// containers started from now on); a change re-syncs the volumes at once
// and configures a container waiting in CreateContainerConfigError again
// at once (its subPathExpr may name an annotation that has just come).
func (w *worker) onMeta(md *corev1.ObjectMeta) {
	cur := w.pod.GetMetadata()
	if cur == nil || (maps.Equal(cur.GetLabels(), md.GetLabels()) && maps.Equal(cur.GetAnnotations(), md.GetAnnotations())) {
		return
	}
	cur.Labels, cur.Annotations = md.GetLabels(), md.GetAnnotations()
	w.remount = true
	for _, c := range w.all() { // a fieldRef may read them: configure again at once
		c.configRetry = time.Time{}
	}
}

// refreshVolumes is kubelet's remount on sync (the volume manager's
// reconciler, configMap and secret volumes re-read each sync period): once
// a SyncPeriod, or at once after a pod update, the configMap, secret and
// downwardAPI volumes are resolved again and those whose files changed
// are mounted again; the runtime swaps the files in atomically. A failure
// leaves the files as they were, with a FailedMount Warning, and is tried
// again at the next sync. It returns when the next sync is due.
func (w *worker) refreshVolumes(ctx context.Context, now time.Time) time.Time {
	if !slices.ContainsFunc(w.pod.GetSpec().GetVolumes(), synced) {
		return time.Time{}
	}
	if !w.remount && now.Before(w.volSync) {
		return w.volSync
	}
	w.remount = false
	next := w.nextVolumeSync(now)
	vols, err := w.resolveVolumes(ctx)
	if err == nil {
		sums, changed := changedVolumes(w.volSums, vols)
		if len(changed) > 0 {
			err = w.d.rt.MountVolumes(ctx, w.pod, changed)
		}
		if err == nil {
			w.volSums = w.volSums.merge(sums)
		}
	}
	if err != nil && ctx.Err() == nil {
		w.rep.Warn(eventsv1.ReasonFailedMount, message(err))
	}
	return next
}

// volDigest is the digest of the files of one synced volume, by name.
type volDigest struct {
	name string
	sum  [sha256.Size]byte
}

// volDigests are a worker's volume digests: a pod has a few synced
// volumes at most, so a slice (a map of one entry costs ~400 bytes a pod).
type volDigests []volDigest

func (ds volDigests) get(name string) ([sha256.Size]byte, bool) {
	for _, d := range ds {
		if d.name == name {
			return d.sum, true
		}
	}
	return [sha256.Size]byte{}, false
}

// merge sets each digest of more in ds.
func (ds volDigests) merge(more volDigests) volDigests {
	for _, m := range more {
		if i := slices.IndexFunc(ds, func(d volDigest) bool { return d.name == m.name }); i >= 0 {
			ds[i].sum = m.sum
		} else {
			ds = append(ds, m)
		}
	}
	return ds
}

// changedVolumes returns the digests of the synced volumes' files and
// those volumes whose digest differs from last.
func changedVolumes(last volDigests, vols []VolumeData) (volDigests, []VolumeData) {
	var sums volDigests
	var changed []VolumeData
	var buf []byte
	for _, vd := range vols {
		if !synced(vd.Volume) {
			continue
		}
		h := sha256.New()
		for _, p := range slices.Sorted(maps.Keys(vd.Files)) {
			// "<len(p)>:<p><len(file)>:<file>"
			buf = strconv.AppendInt(buf[:0], int64(len(p)), 10)
			buf = append(append(buf, ':'), p...)
			buf = append(strconv.AppendInt(buf, int64(len(vd.Files[p])), 10), ':')
			h.Write(buf)
			h.Write(vd.Files[p])
		}
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		name := vd.Volume.GetName()
		sums = append(sums, volDigest{name: name, sum: sum})
		if old, ok := last.get(name); !ok || old != sum {
			changed = append(changed, vd)
		}
	}
	return sums, changed
}

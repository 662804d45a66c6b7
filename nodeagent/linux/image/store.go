package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// Pulled describes an image in the store.
type Pulled struct {
	// Ref is the normalised reference: "docker.io/library/nginx:latest".
	Ref string
	// ID is the repository digest, reported as containerStatus.imageID:
	// "docker.io/library/nginx@sha256:…" (the digest of what Ref resolved
	// to in the registry: a manifest or an index).
	ID string
	// SizeBytes is the size of the image's content as stored in the
	// registry (compressed layers and config).
	SizeBytes int64
	// AlreadyPresent is true when the store had the image and did not
	// contact a registry (IfNotPresent or Never).
	AlreadyPresent bool
	// Config is what the image says about how to run it.
	Config ImageConfig
}

// ImageConfig is the part of an OCI image config a runtime uses.
type ImageConfig struct {
	Entrypoint   []string `json:"entrypoint,omitempty"`
	Cmd          []string `json:"cmd,omitempty"`
	Env          []string `json:"env,omitempty"`
	WorkingDir   string   `json:"workingDir,omitempty"`
	User         string   `json:"user,omitempty"`
	ExposedPorts []string `json:"exposedPorts,omitempty"` // "80/tcp", sorted
}

// record is an image of the index, persisted in images.json.
type record struct {
	Ref       string      `json:"ref"`
	ID        string      `json:"id"`
	Manifest  string      `json:"manifest"` // digest of the platform image manifest
	ConfigID  string      `json:"config"`   // digest of the image config
	Layers    []layerRec  `json:"layers"`
	SizeBytes int64       `json:"sizeBytes"`
	Config    ImageConfig `json:"imageConfig"`
	PulledAt  time.Time   `json:"pulledAt"`
}

type layerRec struct {
	Digest string `json:"digest"` // as stored in the registry
	DiffID string `json:"diffID"` // of the uncompressed tarball, its name in layers/
	Size   int64  `json:"size"`
}

func (r *record) pulled(already bool) Pulled {
	return Pulled{Ref: r.Ref, ID: r.ID, SizeBytes: r.SizeBytes, AlreadyPresent: already, Config: r.Config}
}

// Store is a node's image store. See the package documentation.
type Store struct {
	cfg      Config
	platform v1.Platform

	ctx    context.Context // cancelled by Close; downloads run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{}   // layer download slots
	tr     *http.Transport // owned: idle connections closed by Close

	images    *flightGroup[*record]
	layers    *flightGroup[struct{}]
	snapshots *flightGroup[struct{}]

	mu    sync.Mutex
	index map[string]*record // by Ref
}

// NewStore opens (creating if needed) the store in cfg.Dir.
func NewStore(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, d := range []string{"blobs/sha256", "layers/sha256", "snapshots", "tmp"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("image: create store dir: %w", err)
		}
	}
	// Downloads interrupted by a crash leave files in tmp/ only.
	if ents, err := os.ReadDir(filepath.Join(cfg.Dir, "tmp")); err == nil {
		for _, e := range ents {
			_ = os.RemoveAll(filepath.Join(cfg.Dir, "tmp", e.Name()))
		}
	}
	s := &Store{
		cfg:      cfg,
		platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		sem:      make(chan struct{}, cfg.Parallelism),
		tr:       remote.DefaultTransport.(*http.Transport).Clone(),
		index:    map[string]*record{},
	}
	if err := s.loadIndex(); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.images = newFlightGroup[*record](s.ctx, &s.wg)
	s.layers = newFlightGroup[struct{}](s.ctx, &s.wg)
	s.snapshots = newFlightGroup[struct{}](s.ctx, &s.wg)
	return s, nil
}

// Close cancels downloads in flight and waits for them to end. It is
// idempotent. Calls after Close fail with ErrClosed.
func (s *Store) Close() error {
	s.cancel()
	s.wg.Wait()
	s.tr.CloseIdleConnections()
	return nil
}

// Pull makes ref present according to policy: Always (ask the registry; the
// layers already stored are not downloaded again), IfNotPresent (ask only
// when the store lacks ref), Never (fail with ErrNeverPull,
// wrapping ErrNotPresent, when it lacks ref), or "" for Kubernetes' default
// (Always for :latest or no tag, IfNotPresent otherwise). Every other
// failure is ErrPull.
func (s *Store) Pull(ctx context.Context, ref, policy string, opts ...PullOption) (Pulled, error) {
	var o pullOptions
	for _, opt := range opts {
		opt(&o)
	}
	r, err := parseReference(ref, s.cfg.Mirror, s.cfg.Insecure)
	if err != nil {
		return Pulled{}, classify(ErrPull, "%w", err)
	}
	if policy == "" {
		policy = podrules.DefaultPullPolicy(ref)
	}
	rec := s.lookup(r.canonical)
	switch policy {
	case PullNever:
		if rec == nil {
			return Pulled{}, classify(ErrNeverPull,
				"image %q is not present with pull policy of Never: %w", ref, ErrNotPresent)
		}
		return rec.pulled(true), nil
	case PullIfNotPresent:
		if rec != nil {
			return rec.pulled(true), nil
		}
	case PullAlways:
	default:
		return Pulled{}, classify(ErrPull, "%w %q", ErrInvalidPolicy, policy)
	}
	if s.ctx.Err() != nil {
		return Pulled{}, classify(ErrPull, "pull %q: %w", ref, ErrClosed)
	}
	// As kubelet: each credential of the keyring that matches the image's
	// registry in turn until one pulls; with none, anonymously.
	auths := []*authn.AuthConfig{nil}
	if creds := o.keyring.lookup(r.registry, r.path); len(creds) > 0 {
		auths = auths[:0]
		for i := range creds {
			auths = append(auths, &creds[i])
		}
	}
	var errs []error
	for _, auth := range auths {
		rec, _, err = s.images.do(ctx, flightKey(r.canonical, auth), func(ctx context.Context) (*record, error) {
			return s.fetch(ctx, r, auth)
		})
		if err == nil {
			return rec.pulled(false), nil
		}
		errs = append(errs, err)
	}
	return Pulled{}, classify(ErrPull, "pull %q: %w", ref, errors.Join(errs...))
}

// PullOption configures one Pull.
type PullOption func(*pullOptions)

type pullOptions struct{ keyring Keyring }

// WithKeyring pulls with the credentials of k (a pod's imagePullSecrets)
// that match the image's registry as written (with a Mirror, Docker Hub's
// credentials go to the mirror). An image already present is not pulled
// again under IfNotPresent and Never, whoever pulled it — as kubelet
// without its ensure-secret-pulled-images check.
func WithKeyring(k Keyring) PullOption { return func(o *pullOptions) { o.keyring = k } }

// Image returns the image ref names (a reference or an image ID) if the
// store has it; otherwise an error wrapping ErrNotPresent.
func (s *Store) Image(ref string) (Pulled, error) {
	rec, err := s.find(ref)
	if err != nil {
		return Pulled{}, err
	}
	return rec.pulled(true), nil
}

// Images lists the stored images for Node.status.images, one entry per
// image (by config digest) with its names — repository digests and tagged
// references, as Kubernetes reports them — largest first.
func (s *Store) Images() []*corev1.ContainerImage {
	s.mu.Lock()
	defer s.mu.Unlock()
	byConfig := map[string]*corev1.ContainerImage{}
	for _, rec := range s.index {
		ci := byConfig[rec.ConfigID]
		if ci == nil {
			ci = &corev1.ContainerImage{}
			byConfig[rec.ConfigID] = ci
		}
		for _, n := range []string{rec.ID, rec.Ref} {
			if !slices.Contains(ci.Names, n) {
				ci.Names = append(ci.Names, n)
			}
		}
		ci.SizeBytes = max(ci.SizeBytes, rec.SizeBytes)
	}
	out := make([]*corev1.ContainerImage, 0, len(byConfig))
	for _, ci := range byConfig {
		sort.Strings(ci.Names)
		out = append(out, ci)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].SizeBytes != out[j].SizeBytes {
			return out[i].SizeBytes > out[j].SizeBytes
		}
		return out[i].Names[0] < out[j].Names[0]
	})
	return out
}

// lookup returns the record of a normalised reference, or nil.
func (s *Store) lookup(canonical string) *record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index[canonical]
}

// find resolves ref — a reference as a user wrote it, or an image ID
// ("repo@sha256:…") — to a record.
func (s *Store) find(ref string) (*record, error) {
	r, err := parseReference(ref, s.cfg.Mirror, s.cfg.Insecure)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.index[r.canonical]; rec != nil {
		return rec, nil
	}
	for _, rec := range s.index {
		if rec.ID == r.canonical {
			return rec, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNotPresent, ref)
}

// fetch downloads r's manifest, config and missing layers and records the
// image in the index.
func (s *Store) fetch(ctx context.Context, r reference, auth *authn.AuthConfig) (*record, error) {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(s.platform), remote.WithTransport(s.tr)}
	if auth != nil {
		opts = append(opts, remote.WithAuth(authn.FromConfig(*auth)))
	}
	desc, err := remote.Get(r.remote, opts...)
	if err != nil {
		return nil, fmt.Errorf("get %q: %w", r.remote.String(), err)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, fmt.Errorf("resolve %q for %s/%s: %w", r.remote.String(), s.platform.OS, s.platform.Architecture, err)
	}
	manifestDigest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("manifest of %q: %w", r.remote.String(), err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("manifest of %q: %w", r.remote.String(), err)
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config of %q: %w", r.remote.String(), err)
	}
	if h, _, _ := v1.SHA256(bytesReader(rawConfig)); h != m.Config.Digest {
		return nil, fmt.Errorf("config of %q: %w: got %s, manifest says %s", r.remote.String(), ErrDigestMismatch, h, m.Config.Digest)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config of %q: %w", r.remote.String(), err)
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("image %q has %d layers and %d diffIDs", r.remote.String(), len(m.Layers), len(cf.RootFS.DiffIDs))
	}

	rec := &record{
		Ref:       r.canonical,
		ID:        r.repo + "@" + desc.Digest.String(),
		Manifest:  manifestDigest.String(),
		ConfigID:  m.Config.Digest.String(),
		SizeBytes: m.Config.Size,
		Config:    imageConfig(cf),
		PulledAt:  time.Now().UTC(),
	}
	for i, l := range m.Layers {
		rec.Layers = append(rec.Layers, layerRec{Digest: l.Digest.String(), DiffID: cf.RootFS.DiffIDs[i].String(), Size: l.Size})
		rec.SizeBytes += l.Size
	}

	// Layers in parallel, each digest downloaded once across all pulls.
	errs := make([]error, len(m.Layers))
	var wg sync.WaitGroup
	for i, l := range m.Layers {
		diffID := cf.RootFS.DiffIDs[i]
		wg.Go(func() {
			_, _, errs[i] = s.layers.do(ctx, diffID.String(), func(ctx context.Context) (struct{}, error) {
				return struct{}{}, s.fetchLayer(ctx, img, l.Digest, diffID)
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := s.writeBlob(manifestDigest, rawManifest); err != nil {
		return nil, err
	}
	if err := s.writeBlob(m.Config.Digest, rawConfig); err != nil {
		return nil, err
	}
	if err := s.put(rec); err != nil {
		return nil, err
	}
	return rec, nil
}

func imageConfig(cf *v1.ConfigFile) ImageConfig {
	c := ImageConfig{
		Entrypoint: cf.Config.Entrypoint,
		Cmd:        cf.Config.Cmd,
		Env:        cf.Config.Env,
		WorkingDir: cf.Config.WorkingDir,
		User:       cf.Config.User,
	}
	for p := range cf.Config.ExposedPorts {
		c.ExposedPorts = append(c.ExposedPorts, p)
	}
	sort.Strings(c.ExposedPorts)
	return c
}

// layerPath is where the uncompressed tarball of diffID lives.
func (s *Store) layerPath(diffID v1.Hash) string {
	return filepath.Join(s.cfg.Dir, "layers", diffID.Algorithm, diffID.Hex)
}

func (s *Store) blobPath(h v1.Hash) string {
	return filepath.Join(s.cfg.Dir, "blobs", h.Algorithm, h.Hex)
}

// fetchLayer stores layer digest of img uncompressed under its diffID,
// unless it is there already. The uncompressed stream is checked against
// diffID before it is renamed into place.
func (s *Store) fetchLayer(ctx context.Context, img v1.Image, digest, diffID v1.Hash) error {
	dst := s.layerPath(diffID)
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	l, err := img.LayerByDigest(digest)
	if err != nil {
		return fmt.Errorf("layer %s: %w", digest, err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return fmt.Errorf("layer %s: %w", digest, err)
	}
	defer rc.Close()
	return s.writeVerified(ctx, dst, rc, diffID)
}

// writeVerified copies rc to a temporary file, checks its sha256 against
// want, syncs it and renames it to dst.
func (s *Store) writeVerified(ctx context.Context, dst string, rc io.Reader, want v1.Hash) error {
	if want.Algorithm != "sha256" {
		return fmt.Errorf("%w: unsupported algorithm %q", ErrDigestMismatch, want.Algorithm)
	}
	f, err := os.CreateTemp(filepath.Join(s.cfg.Dir, "tmp"), want.Hex[:12]+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx, rc}); err != nil {
		return fmt.Errorf("download %s: %w", want, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want.Hex {
		return fmt.Errorf("%w: %s has sha256:%s", ErrDigestMismatch, want, got)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	ok = true
	return nil
}

func (s *Store) writeBlob(h v1.Hash, b []byte) error {
	dst := s.blobPath(h)
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	return s.writeVerified(s.ctx, dst, bytesReader(b), h)
}

// put records rec in the index and persists the index.
func (s *Store) put(rec *record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.index[rec.Ref]
	s.index[rec.Ref] = rec
	if err := s.saveIndexLocked(); err != nil {
		if prev != nil {
			s.index[rec.Ref] = prev
		} else {
			delete(s.index, rec.Ref)
		}
		return err
	}
	return nil
}

func (s *Store) indexPath() string { return filepath.Join(s.cfg.Dir, "images.json") }

func (s *Store) saveIndexLocked() error {
	recs := make([]*record, 0, len(s.index))
	for _, r := range s.index {
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Ref < recs[j].Ref })
	b, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.indexPath() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("image: save index: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.indexPath())
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image: save index: %w", err)
	}
	return nil
}

// loadIndex reads images.json, keeping only images whose layers are all in
// the content store.
func (s *Store) loadIndex() error {
	b, err := os.ReadFile(s.indexPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("image: load index: %w", err)
	}
	var recs []*record
	if err := json.Unmarshal(b, &recs); err != nil {
		return fmt.Errorf("image: load index %q: %w", s.indexPath(), err)
	}
	for _, r := range recs {
		complete := true
		for _, l := range r.Layers {
			h, err := v1.NewHash(l.DiffID)
			if err != nil {
				complete = false
				break
			}
			if _, err := os.Stat(s.layerPath(h)); err != nil {
				complete = false
				break
			}
		}
		if complete {
			s.index[r.Ref] = r
		}
	}
	return nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// ctxReader makes a long copy stop when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

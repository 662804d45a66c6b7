package image

import (
	"fmt"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/podflow/podflow/proto/podrules"
)

// Pull policies, as in a Kubernetes container's imagePullPolicy.
const (
	PullAlways       = podrules.PullAlways
	PullIfNotPresent = podrules.PullIfNotPresent
	PullNever        = podrules.PullNever
)

// Config configures a Store.
type Config struct {
	// Dir is the store's directory (content store, index, temporary
	// downloads). Required; created if missing.
	Dir string
	// Mirror is the registry address ("127.0.0.1:5000") that stands in for
	// docker.io and so for every reference without a registry. Empty means
	// docker.io itself is contacted.
	Mirror string
	// Insecure makes the store use plain HTTP for Mirror and for any
	// registry it names. Loopback registries ("127.0.0.1:PORT",
	// "localhost:PORT") use plain HTTP regardless.
	Insecure bool
	// Parallelism bounds the layer downloads in flight across all pulls.
	// Default 4.
	Parallelism int
}

// DefaultConfig returns a Config for a store in dir with default settings
// and no mirror.
func DefaultConfig(dir string) Config {
	return Config{Dir: dir, Parallelism: 4}
}

// Validate reports the first invalid field, wrapped in ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return fmt.Errorf("%w: Dir is required", ErrInvalidConfig)
	case !filepath.IsAbs(c.Dir):
		return fmt.Errorf("%w: Dir %q is not absolute", ErrInvalidConfig, c.Dir)
	case c.Parallelism < 1:
		return fmt.Errorf("%w: Parallelism (%d) must be at least 1", ErrInvalidConfig, c.Parallelism)
	}
	if c.Mirror != "" {
		if _, err := name.NewRegistry(c.Mirror, name.StrictValidation); err != nil {
			return fmt.Errorf("%w: Mirror %q is not a registry address: %v", ErrInvalidConfig, c.Mirror, err)
		}
	}
	return nil
}

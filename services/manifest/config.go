package manifest

import "fmt"

// Config bounds what Decode accepts.
type Config struct {
	// MaxBytes is the largest manifest Decode parses, in bytes; larger input
	// is refused before parsing. Default 3 MiB, the Kubernetes API server's
	// request body limit.
	MaxBytes int
	// MaxDocuments is the most objects one manifest may hold, counting the
	// items of a List. Default 10000.
	MaxDocuments int
	// MaxAliasNodes is the most YAML nodes that aliases (*name) may add to a
	// document once expanded; a document over it is refused before it is
	// expanded. Default 100000 (real manifests rarely use aliases at all).
	MaxAliasNodes int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{MaxBytes: 3 << 20, MaxDocuments: 10000, MaxAliasNodes: 100000}
}

// Validate reports a Config that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxBytes <= 0:
		return fmt.Errorf("%w: MaxBytes (%d) must be positive", ErrInvalidConfig, c.MaxBytes)
	case c.MaxDocuments <= 0:
		return fmt.Errorf("%w: MaxDocuments (%d) must be positive", ErrInvalidConfig, c.MaxDocuments)
	case c.MaxAliasNodes < 0:
		return fmt.Errorf("%w: MaxAliasNodes (%d) cannot be negative", ErrInvalidConfig, c.MaxAliasNodes)
	}
	return nil
}

// Option adjusts the Config of one Decode call.
type Option func(*Config)

// WithConfig replaces the whole Config.
func WithConfig(c Config) Option { return func(dst *Config) { *dst = c } }

// WithMaxBytes sets Config.MaxBytes.
func WithMaxBytes(n int) Option { return func(c *Config) { c.MaxBytes = n } }

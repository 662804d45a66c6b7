package raftstore

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/nacl/secretbox"
	"sigs.k8s.io/yaml"
)

// Encryption at rest, as kube-apiserver's EncryptionConfiguration
// (--encryption-provider-config): values under the configured key
// prefixes are encrypted by the leader before their write enters the raft
// log, so the log, the snapshots and any copy of them hold ciphertext;
// every replica decrypts what it serves (reads, lists, watch events).
//
// The stored form is kube-apiserver's: "k8s:enc:<provider>:v1:<key
// name>:" followed by, for secretbox, a 24-byte random nonce and the
// NaCl secretbox of the value; for aesgcm, a 12-byte random nonce and the
// AES-GCM sealing of the value with the store key as additional data (a
// ciphertext moved to another key does not decrypt).
//
// The first provider of a resource writes; all of them read. Key
// rotation is kube-apiserver's: add the new key as the second provider on
// every replica (restart each), then make it the first (restart each),
// then rewrite every encrypted value (Client.RewriteEncrypted, `podflow
// store rewrite-encrypted`), then drop the old key.

// EncryptionConfigAPIVersion and EncryptionConfigKind name the
// configuration file's type, as kube-apiserver's.
const (
	EncryptionConfigAPIVersion = "apiserver.config.k8s.io/v1"
	EncryptionConfigKind       = "EncryptionConfiguration"
	encPrefix                  = "k8s:enc:"
)

// Encryption is a parsed encryption configuration; nil encrypts nothing.
// It is safe for concurrent use.
type Encryption struct {
	rules []encRule
}

// encRule is the providers of the keys under some prefixes.
type encRule struct {
	prefixes []string
	write    encProvider            // the first provider
	read     map[string]encProvider // by stored prefix ("k8s:enc:secretbox:v1:key1:")
	identity bool                   // identity is a provider: values without a prefix are plaintext
}

// encProvider seals and opens values with one key; nil is identity.
type encProvider interface {
	prefix() string // what the sealed value starts with
	seal(key string, plain []byte) ([]byte, error)
	open(key string, sealed []byte) ([]byte, error)
}

// encryptionConfig is the file's form (kube-apiserver's
// apiserver.config.k8s.io/v1 EncryptionConfiguration, the providers
// raftstore implements).
type encryptionConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Resources  []struct {
		Resources []string `json:"resources"`
		Providers []struct {
			AESGCM    *keyList  `json:"aesgcm,omitempty"`
			Secretbox *keyList  `json:"secretbox,omitempty"`
			Identity  *struct{} `json:"identity,omitempty"`
			AESCBC    *keyList  `json:"aescbc,omitempty"`
			KMS       any       `json:"kms,omitempty"`
		} `json:"providers"`
	} `json:"resources"`
}

type keyList struct {
	Keys []struct {
		Name   string `json:"name"`
		Secret string `json:"secret"`
	} `json:"keys"`
}

// LoadEncryptionConfig reads an EncryptionConfiguration file. The file
// holds keys: it is refused when group or other users may read it.
func LoadEncryptionConfig(path string) (*Encryption, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("raftstore: encryption config: %w", err)
	}
	if m := info.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("raftstore: encryption config %q is mode %04o: it holds keys, make it readable by its owner only (chmod 600)", path, m)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("raftstore: encryption config: %w", err)
	}
	e, err := ParseEncryptionConfig(data)
	if err != nil {
		return nil, fmt.Errorf("raftstore: encryption config %q: %w", path, err)
	}
	return e, nil
}

// ParseEncryptionConfig parses an EncryptionConfiguration (YAML or JSON).
// Resources name what is encrypted: "secrets" is every key under
// /registry/secrets/, "<resource>.<group>" is /registry/<resource>/ for
// Kubernetes' own groups and /registry/<group>/<resource>/ for others,
// and a name starting with "/" is that key prefix itself. Providers are
// secretbox and aesgcm (each a list of named keys, base64, 32 bytes for
// secretbox, 16, 24 or 32 for aesgcm) and identity (no encryption).
func ParseEncryptionConfig(data []byte) (*Encryption, error) {
	var c encryptionConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if c.APIVersion != EncryptionConfigAPIVersion || c.Kind != EncryptionConfigKind {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want %s, %s", c.APIVersion, c.Kind, EncryptionConfigAPIVersion, EncryptionConfigKind)
	}
	var errs []error
	e := &Encryption{}
	seen := map[string]bool{}
	for i, r := range c.Resources {
		rule := encRule{read: map[string]encProvider{}}
		if len(r.Resources) == 0 {
			errs = append(errs, fmt.Errorf("resources[%d]: no resources named", i))
		}
		for _, name := range r.Resources {
			p, err := resourcePrefix(name)
			if err != nil {
				errs = append(errs, fmt.Errorf("resources[%d]: %w", i, err))
				continue
			}
			if seen[p] {
				errs = append(errs, fmt.Errorf("resources[%d]: %q is named twice", i, name))
			}
			seen[p] = true
			rule.prefixes = append(rule.prefixes, p)
		}
		if len(r.Providers) == 0 {
			errs = append(errs, fmt.Errorf("resources[%d]: no providers", i))
		}
		for j, pv := range r.Providers {
			var ps []encProvider
			var err error
			n := 0
			if pv.Secretbox != nil {
				n++
				ps, err = pv.Secretbox.providers("secretbox", 32, newSecretbox)
			}
			if pv.AESGCM != nil {
				n++
				ps, err = pv.AESGCM.providers("aesgcm", 0, newAESGCM)
			}
			if pv.Identity != nil {
				n++
			}
			if pv.AESCBC != nil || pv.KMS != nil {
				err = errors.New("aescbc and kms are not supported (secretbox, aesgcm, identity)")
			}
			if err == nil && n != 1 {
				err = fmt.Errorf("want exactly one of secretbox, aesgcm, identity, got %d", n)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("resources[%d].providers[%d]: %w", i, j, err))
				continue
			}
			if pv.Identity != nil {
				rule.identity = true
				if j == 0 {
					rule.write = nil
				}
				continue
			}
			for k, p := range ps {
				if rule.read[p.prefix()] != nil {
					errs = append(errs, fmt.Errorf("resources[%d].providers[%d]: key %q is listed twice", i, j, p.prefix()))
				}
				rule.read[p.prefix()] = p
				if j == 0 && k == 0 {
					rule.write = p
				}
			}
		}
		e.rules = append(e.rules, rule)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return e, nil
}

// kubeGroups are the API groups whose resources Kubernetes stores under
// /registry/<resource>/.
var kubeGroups = map[string]bool{"": true, "apps": true, "batch": true, "policy": true, "autoscaling": true}

// resourcePrefix is the key prefix of a resource name of the configuration.
func resourcePrefix(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("empty resource name")
	case strings.HasPrefix(name, "/"):
		if !strings.HasSuffix(name, "/") {
			return "", fmt.Errorf("key prefix %q must end with /", name)
		}
		return name, nil
	case strings.Contains(name, "*"):
		return "", fmt.Errorf("resource %q: wildcards are not supported; name each resource", name)
	}
	res, group, _ := strings.Cut(name, ".")
	if kubeGroups[group] || strings.HasSuffix(group, ".k8s.io") {
		return "/registry/" + res + "/", nil
	}
	return "/registry/" + group + "/" + res + "/", nil
}

func (l *keyList) providers(kind string, size int, mk func(name string, key []byte) (encProvider, error)) ([]encProvider, error) {
	if len(l.Keys) == 0 {
		return nil, fmt.Errorf("%s: no keys", kind)
	}
	var out []encProvider
	for _, k := range l.Keys {
		if k.Name == "" || strings.Contains(k.Name, ":") {
			return nil, fmt.Errorf("%s: key name %q must be non-empty and contain no ':'", kind, k.Name)
		}
		key, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("%s key %q: secret is not base64: %w", kind, k.Name, err)
		}
		if size > 0 && len(key) != size {
			return nil, fmt.Errorf("%s key %q: %d bytes, want %d", kind, k.Name, len(key), size)
		}
		p, err := mk(k.Name, key)
		if err != nil {
			return nil, fmt.Errorf("%s key %q: %w", kind, k.Name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// secretboxProvider is kube-apiserver's secretbox transformer.
type secretboxProvider struct {
	pfx string
	key [32]byte
}

func newSecretbox(name string, key []byte) (encProvider, error) {
	p := &secretboxProvider{pfx: encPrefix + "secretbox:v1:" + name + ":"}
	copy(p.key[:], key)
	return p, nil
}

func (p *secretboxProvider) prefix() string { return p.pfx }

func (p *secretboxProvider) seal(_ string, plain []byte) ([]byte, error) {
	var nonce [24]byte
	if _, err := io.ReadFull(rand.Reader, nonce[:]); err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(p.pfx)+len(nonce)+len(plain)+secretbox.Overhead)
	out = append(append(out, p.pfx...), nonce[:]...)
	return secretbox.Seal(out, plain, &nonce, &p.key), nil
}

func (p *secretboxProvider) open(_ string, sealed []byte) ([]byte, error) {
	if len(sealed) < 24 {
		return nil, errors.New("too short for a secretbox")
	}
	var nonce [24]byte
	copy(nonce[:], sealed)
	plain, ok := secretbox.Open(nil, sealed[24:], &nonce, &p.key)
	if !ok {
		return nil, errors.New("secretbox: message authentication failed (wrong key or altered value)")
	}
	return plain, nil
}

// aesgcmProvider is kube-apiserver's aesgcm transformer: the store key is
// the additional data.
type aesgcmProvider struct {
	pfx string
	gcm cipher.AEAD
}

func newAESGCM(name string, key []byte) (encProvider, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &aesgcmProvider{pfx: encPrefix + "aesgcm:v1:" + name + ":", gcm: gcm}, nil
}

func (p *aesgcmProvider) prefix() string { return p.pfx }

func (p *aesgcmProvider) seal(key string, plain []byte) ([]byte, error) {
	ns := p.gcm.NonceSize()
	out := make([]byte, len(p.pfx)+ns, len(p.pfx)+ns+len(plain)+p.gcm.Overhead())
	copy(out, p.pfx)
	if _, err := io.ReadFull(rand.Reader, out[len(p.pfx):]); err != nil {
		return nil, err
	}
	return p.gcm.Seal(out, out[len(p.pfx):], plain, []byte(key)), nil
}

func (p *aesgcmProvider) open(key string, sealed []byte) ([]byte, error) {
	ns := p.gcm.NonceSize()
	if len(sealed) < ns {
		return nil, errors.New("too short for AES-GCM")
	}
	plain, err := p.gcm.Open(nil, sealed[:ns], sealed[ns:], []byte(key))
	if err != nil {
		return nil, fmt.Errorf("aesgcm: %w (wrong key, altered value, or a value moved from another key)", err)
	}
	return plain, nil
}

// rule returns the rule covering key, or nil.
func (e *Encryption) rule(key string) *encRule {
	if e == nil {
		return nil
	}
	for i := range e.rules {
		for _, p := range e.rules[i].prefixes {
			if strings.HasPrefix(key, p) {
				return &e.rules[i]
			}
		}
	}
	return nil
}

// covers reports whether values of key are transformed.
func (e *Encryption) covers(key string) bool { return e.rule(key) != nil }

// encrypt returns the stored form of key's value: sealed by the rule's
// first provider, unchanged when key is not covered or identity writes.
func (e *Encryption) encrypt(key string, plain []byte) ([]byte, error) {
	r := e.rule(key)
	if r == nil || r.write == nil {
		return plain, nil
	}
	return r.write.seal(key, plain)
}

// current reports whether key's stored value is in the form its rule
// writes now (a rewrite leaves it alone).
func (e *Encryption) current(key string, stored []byte) bool {
	r := e.rule(key)
	if r == nil {
		return true
	}
	if r.write == nil {
		return !bytes.HasPrefix(stored, []byte(encPrefix))
	}
	return bytes.HasPrefix(stored, []byte(r.write.prefix()))
}

// decrypt returns key's value from its stored form. A value sealed with a
// key the configuration does not list fails, naming the key, as does one
// that does not authenticate: never garbage.
func (e *Encryption) decrypt(key string, stored []byte) ([]byte, error) {
	r := e.rule(key)
	if r == nil {
		return stored, nil
	}
	if !bytes.HasPrefix(stored, []byte(encPrefix)) {
		if r.identity || len(stored) == 0 {
			return stored, nil
		}
		return nil, fmt.Errorf("value of %q is not encrypted and the encryption configuration lists no identity provider for it", key)
	}
	// k8s:enc:<provider>:v1:<name>:
	rest := stored[len(encPrefix):]
	end := len(encPrefix)
	for i := 0; i < 3; i++ {
		j := bytes.IndexByte(rest, ':')
		if j < 0 {
			return nil, fmt.Errorf("value of %q has a malformed encryption prefix", key)
		}
		end += j + 1
		rest = rest[j+1:]
	}
	pfx := string(stored[:end])
	p := r.read[pfx]
	if p == nil {
		return nil, fmt.Errorf("value of %q is encrypted with %q, a key the encryption configuration does not list", key, strings.TrimSuffix(strings.TrimPrefix(pfx, encPrefix), ":"))
	}
	plain, err := p.open(key, stored[end:])
	if err != nil {
		return nil, fmt.Errorf("decrypt value of %q with %q: %w", key, strings.TrimSuffix(strings.TrimPrefix(pfx, encPrefix), ":"), err)
	}
	return plain, nil
}

// NewEncryptionConfig returns an EncryptionConfiguration (YAML) encrypting
// resources (default: secrets) with one new random secretbox key named
// name, with identity as the second provider so that values stored before
// encryption was turned on still read (rewrite them to encrypt them).
func NewEncryptionConfig(name string, resources ...string) ([]byte, error) {
	if len(resources) == 0 {
		resources = []string{"secrets"}
	}
	var key [32]byte
	if _, err := io.ReadFull(rand.Reader, key[:]); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\nresources:\n- resources:\n", EncryptionConfigAPIVersion, EncryptionConfigKind)
	for _, r := range resources {
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	fmt.Fprintf(&b, "  providers:\n  - secretbox:\n      keys:\n      - name: %s\n        secret: %s\n  - identity: {}\n", name, base64.StdEncoding.EncodeToString(key[:]))
	if _, err := ParseEncryptionConfig([]byte(b.String())); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// EnsureEncryptionConfig writes a new EncryptionConfiguration
// (NewEncryptionConfig, key "key1", secrets) to path, mode 0600, unless the
// file exists; it returns whether it wrote one. `podflow up` calls it on
// first start and gives the file to every store replica.
func EnsureEncryptionConfig(path string) (bool, error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	data, err := NewEncryptionConfig("key1")
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), privateDirMode); err != nil {
		return false, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, privateFileMode); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	return true, nil
}

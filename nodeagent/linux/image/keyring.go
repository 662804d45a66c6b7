package image

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Secret types and keys of registry credentials, as Kubernetes names them.
const (
	SecretTypeDockerConfigJSON = "kubernetes.io/dockerconfigjson"
	SecretTypeDockercfg        = "kubernetes.io/dockercfg"
	DockerConfigJSONKey        = ".dockerconfigjson"
	DockercfgKey               = ".dockercfg"
)

// Keyring is registry credentials as kubelet's BasicDockerKeyring holds
// those of a pod's imagePullSecrets: entries keyed by a registry
// ("registry.example.com", "https://127.0.0.1:5000", a host with a
// repository path prefix "host/team"), more specific keys first. The zero
// Keyring has none: pulls are anonymous.
type Keyring struct {
	entries []keyringEntry
}

type keyringEntry struct {
	key        string // as written in the docker config
	host, path string // parsed: host[:port] and a path prefix without slashes around it
	auth       authn.AuthConfig
}

// dockerConfigEntry is one credential of a docker config.
type dockerConfigEntry struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Auth     string `json:"auth,omitempty"`
	Email    string `json:"email,omitempty"`
}

// KeyringFromSecrets builds the keyring of secrets as kubelet's
// MakeDockerKeyring: a kubernetes.io/dockerconfigjson Secret's
// .dockerconfigjson ({"auths": {registry: entry}}) and a
// kubernetes.io/dockercfg Secret's .dockercfg ({registry: entry}); Secrets
// of other types, or without their key, are skipped, as kubelet skips
// them. An entry's "auth" (base64 of user:password) gives its username and
// password. A key that does not parse is an error naming the Secret.
func KeyringFromSecrets(secrets []*corev1.Secret) (Keyring, error) {
	var k Keyring
	for _, s := range secrets {
		var entries map[string]dockerConfigEntry
		switch {
		case s.GetType() == SecretTypeDockerConfigJSON && len(s.GetData()[DockerConfigJSONKey]) > 0:
			var cfg struct {
				Auths map[string]dockerConfigEntry `json:"auths"`
			}
			if err := json.Unmarshal(s.GetData()[DockerConfigJSONKey], &cfg); err != nil {
				return Keyring{}, fmt.Errorf("image pull secret %q: %s: %w", s.GetMetadata().GetName(), DockerConfigJSONKey, err)
			}
			entries = cfg.Auths
		case s.GetType() == SecretTypeDockercfg && len(s.GetData()[DockercfgKey]) > 0:
			if err := json.Unmarshal(s.GetData()[DockercfgKey], &entries); err != nil {
				return Keyring{}, fmt.Errorf("image pull secret %q: %s: %w", s.GetMetadata().GetName(), DockercfgKey, err)
			}
		default:
			continue
		}
		for key, e := range entries {
			if e.Auth != "" {
				raw, err := base64.StdEncoding.DecodeString(e.Auth)
				if err != nil {
					return Keyring{}, fmt.Errorf("image pull secret %q: auth of %q: %w", s.GetMetadata().GetName(), key, err)
				}
				user, pass, ok := strings.Cut(string(raw), ":")
				if !ok {
					return Keyring{}, fmt.Errorf("image pull secret %q: auth of %q: not user:password", s.GetMetadata().GetName(), key)
				}
				e.Username, e.Password = user, pass
			}
			host, path := parseRegistryKey(key)
			k.entries = append(k.entries, keyringEntry{key: key, host: host, path: path,
				auth: authn.AuthConfig{Username: e.Username, Password: e.Password}})
		}
	}
	// As kubelet's keyring: the index sorted in reverse, so that a longer
	// key of the same registry ("host/team") is tried before "host".
	slices.SortStableFunc(k.entries, func(a, b keyringEntry) int { return strings.Compare(b.key, a.key) })
	return k, nil
}

// parseRegistryKey splits a docker config key ("https://host:5000/v1/",
// "host/team") into its host and path prefix. Docker Hub's keys are
// index.docker.io.
func parseRegistryKey(key string) (host, path string) {
	s := key
	if u, err := url.Parse(key); err == nil && u.Scheme != "" && u.Host != "" {
		s = u.Host + u.Path
	}
	host, path, _ = strings.Cut(s, "/")
	path = strings.Trim(path, "/")
	if host == "docker.io" || host == "registry-1.docker.io" || host == dockerHub {
		host, path = dockerHub, strings.TrimPrefix(path, "v1")
		path = strings.Trim(path, "/")
	}
	return host, path
}

// lookup returns the credentials for repository repo of registry reg, in
// the order kubelet tries them.
func (k Keyring) lookup(reg, repo string) []authn.AuthConfig {
	var out []authn.AuthConfig
	for _, e := range k.entries {
		if e.host == reg && (e.path == "" || repo == e.path || strings.HasPrefix(repo, e.path+"/")) {
			out = append(out, e.auth)
		}
	}
	return out
}

// flightKey is the store's flight key of a download of canonical with
// credential a (nil: anonymous, the key is canonical): a pull never joins
// a download made with other credentials.
func flightKey(canonical string, a *authn.AuthConfig) string {
	if a == nil {
		return canonical
	}
	sum := sha256.Sum256([]byte(a.Username + "\x00" + a.Password))
	return canonical + "\x00" + hex.EncodeToString(sum[:8])
}

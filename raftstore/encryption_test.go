package raftstore

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func b64(n int) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, n)) }

func TestParseEncryptionConfig(t *testing.T) {
	head := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n"
	for _, tc := range []struct {
		name, yaml, wantErr string
	}{
		{"secretbox then identity", "resources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: k1, secret: " + b64(32) + "}]}\n  - identity: {}\n", ""},
		{"aesgcm 16-byte key", "resources:\n- resources: [secrets, configmaps]\n  providers:\n  - aesgcm: {keys: [{name: k1, secret: " + b64(16) + "}]}\n", ""},
		{"wrong kind", "resources: []\n", ""},
		{"secretbox key too short", "resources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: k1, secret: " + b64(16) + "}]}\n", "16 bytes, want 32"},
		{"aesgcm bad size", "resources:\n- resources: [secrets]\n  providers:\n  - aesgcm: {keys: [{name: k1, secret: " + b64(20) + "}]}\n", "invalid key size"},
		{"not base64", "resources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: k1, secret: '!!'}]}\n", "not base64"},
		{"aescbc", "resources:\n- resources: [secrets]\n  providers:\n  - aescbc: {keys: [{name: k1, secret: " + b64(32) + "}]}\n", "not supported"},
		{"two in one provider", "resources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n    secretbox: {keys: [{name: k1, secret: " + b64(32) + "}]}\n", "exactly one"},
		{"duplicate key", "resources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: k1, secret: " + b64(32) + "}, {name: k1, secret: " + b64(32) + "}]}\n", "listed twice"},
		{"wildcard", "resources:\n- resources: ['*.*']\n  providers:\n  - identity: {}\n", "wildcards"},
		{"unknown field", "resources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n  extra: 1\n", "unknown field"},
		{"no providers", "resources:\n- resources: [secrets]\n  providers: []\n", "no providers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := head + tc.yaml
			if tc.name == "wrong kind" {
				y = "apiVersion: v1\nkind: ConfigMap\n" + tc.yaml
				tc.wantErr = "want apiserver.config.k8s.io/v1"
			}
			_, err := ParseEncryptionConfig([]byte(y))
			if tc.wantErr == "" && err != nil {
				t.Fatalf("ParseEncryptionConfig: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("ParseEncryptionConfig = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestResourcePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"secrets":                         "/registry/secrets/",
		"deployments.apps":                "/registry/deployments/",
		"roles.rbac.authorization.k8s.io": "/registry/roles/",
		"crontabs.stable.example.com":     "/registry/stable.example.com/crontabs/",
		"/registry/custom/":               "/registry/custom/",
	} {
		if got, err := resourcePrefix(in); err != nil || got != want {
			t.Errorf("resourcePrefix(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestEncryptionSealOpen: each provider seals in kube-apiserver's form and
// opens its own; a value altered by one byte, an aesgcm value moved to
// another key, and a value sealed with a key not listed fail with an
// error naming the key, never returning bytes; keys outside the prefixes
// are stored as written.
func TestEncryptionSealOpen(t *testing.T) {
	for _, kind := range []string{"secretbox", "aesgcm"} {
		t.Run(kind, func(t *testing.T) {
			e, err := ParseEncryptionConfig([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - " + kind + ": {keys: [{name: k1, secret: " + b64(32) + "}]}\n"))
			if err != nil {
				t.Fatal(err)
			}
			const key = "/registry/secrets/ns/a"
			plain := []byte("hunter2")
			sealed, err := e.encrypt(key, plain)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(sealed, []byte("k8s:enc:"+kind+":v1:k1:")) || bytes.Contains(sealed, plain) {
				t.Fatalf("sealed form %q", sealed)
			}
			if !e.current(key, sealed) || e.current(key, plain) {
				t.Fatal("current() does not tell the write key's form from plaintext")
			}
			if got, err := e.decrypt(key, sealed); err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("decrypt = %q, %v", got, err)
			}
			bad := bytes.Clone(sealed)
			bad[len(bad)-1] ^= 1
			if got, err := e.decrypt(key, bad); err == nil || got != nil || !strings.Contains(err.Error(), kind+":v1:k1") {
				t.Fatalf("decrypt of an altered value = %q, %v; want an error naming the key", got, err)
			}
			if kind == "aesgcm" {
				if got, err := e.decrypt("/registry/secrets/ns/b", sealed); err == nil || got != nil {
					t.Fatalf("an aesgcm value moved to another key decrypted: %q", got)
				}
			}
			other := bytes.Replace(sealed, []byte(":k1:"), []byte(":k9:"), 1)
			if _, err := e.decrypt(key, other); err == nil || !strings.Contains(err.Error(), `"`+kind+`:v1:k9", a key the encryption configuration does not list`) {
				t.Fatalf("decrypt with an unknown key: %v", err)
			}
			if _, err := e.decrypt(key, plain); err == nil || !strings.Contains(err.Error(), "no identity provider") {
				t.Fatalf("plaintext without identity: %v", err)
			}
			cm := []byte("not a secret")
			if got, _ := e.encrypt("/registry/configmaps/ns/a", cm); !bytes.Equal(got, cm) {
				t.Fatalf("a configmap was sealed: %q", got)
			}
		})
	}
}

// TestEncryptionConfigFile: EnsureEncryptionConfig writes a 0600 file once
// that LoadEncryptionConfig reads; a file others may read is refused.
func TestEncryptionConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "enc", "encryption-config.yaml")
	if wrote, err := EnsureEncryptionConfig(path); err != nil || !wrote {
		t.Fatalf("EnsureEncryptionConfig = %v, %v", wrote, err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", info.Mode(), err)
	}
	before, _ := os.ReadFile(path)
	if wrote, err := EnsureEncryptionConfig(path); err != nil || wrote {
		t.Fatalf("second EnsureEncryptionConfig = %v, %v; want the file kept", wrote, err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("the key file changed on the second start")
	}
	e, err := LoadEncryptionConfig(path)
	if err != nil || !e.covers("/registry/secrets/a/b") || e.covers("/registry/configmaps/a/b") {
		t.Fatalf("LoadEncryptionConfig = %v, %v", e, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadEncryptionConfig(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("LoadEncryptionConfig of a 0644 key file: %v", err)
	}
}

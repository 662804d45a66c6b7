package image_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/image"
	"github.com/podflow/podflow/nodeagent/linux/image/imagetest"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

func dockerConfigSecret(name, registry, user, pass string) *corev1.Secret {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	return &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default"}, Type: image.SecretTypeDockerConfigJSON,
		Data: map[string][]byte{image.DockerConfigJSONKey: []byte(`{"auths":{"` + registry + `":{"auth":"` + auth + `"}}}`)}}
}

func keyring(t *testing.T, secrets ...*corev1.Secret) image.Keyring {
	t.Helper()
	k, err := image.KeyringFromSecrets(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestPullWithKeyring: against a registry behind basic auth, an anonymous
// pull, one with another registry's credentials and one with a wrong
// password fail with ErrPull naming UNAUTHORIZED; a dockerconfigjson
// Secret (auth as user:password) or a dockercfg Secret (username and
// password) for the registry pulls; of two matching credentials the
// right one is found.
func TestPullWithKeyring(t *testing.T) {
	ctx := context.Background()
	reg := imagetest.NewRegistry(t)
	reg.Push(t, "private/app:1", smallImage(t, "secret"))
	reg.RequireBasicAuth("puller", "s3cret")
	ref := reg.Addr + "/private/app:1"

	for name, k := range map[string]image.Keyring{
		"anonymous":          {},
		"another registry":   keyring(t, dockerConfigSecret("other", "registry.example.com", "puller", "s3cret")),
		"wrong password":     keyring(t, dockerConfigSecret("wrong", reg.Addr, "puller", "nope")),
		"another repository": keyring(t, dockerConfigSecret("repo", reg.Addr+"/public", "puller", "s3cret")),
		"opaque secret": keyring(t, &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "opaque"}, Type: "Opaque",
			Data: map[string][]byte{image.DockerConfigJSONKey: dockerConfigSecret("x", reg.Addr, "puller", "s3cret").Data[image.DockerConfigJSONKey]}}),
	} {
		s := newStore(t, t.TempDir(), "")
		_, err := s.Pull(ctx, ref, image.PullIfNotPresent, image.WithKeyring(k))
		if !errors.Is(err, image.ErrPull) || !strings.Contains(err.Error(), "UNAUTHORIZED") {
			t.Errorf("%s: Pull = %v, want ErrPull naming UNAUTHORIZED", name, err)
		}
	}

	s := newStore(t, t.TempDir(), "")
	wrong := keyring(t, dockerConfigSecret("wrong", reg.Addr, "puller", "nope"))
	right := keyring(t, dockerConfigSecret("right", "http://"+reg.Addr, "puller", "s3cret"))
	if _, err := s.Pull(ctx, ref, image.PullAlways, image.WithKeyring(wrong)); err == nil {
		t.Fatal("wrong password pulled")
	}
	p, err := s.Pull(ctx, ref, image.PullIfNotPresent, image.WithKeyring(right))
	if err != nil || p.AlreadyPresent {
		t.Fatalf("with the Secret: %+v %v", p, err)
	}
	// Both credentials match: tried in turn, the right one pulls.
	both := keyring(t, dockerConfigSecret("wrong", reg.Addr+"/private", "puller", "nope"), dockerConfigSecret("right", reg.Addr, "puller", "s3cret"))
	if _, err := s.Pull(ctx, ref, image.PullAlways, image.WithKeyring(both)); err != nil {
		t.Errorf("two matching credentials, the first wrong: %v", err)
	}

	dockercfg := &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "cfg"}, Type: image.SecretTypeDockercfg,
		Data: map[string][]byte{image.DockercfgKey: []byte(`{"` + reg.Addr + `":{"username":"puller","password":"s3cret"}}`)}}
	if _, err := newStore(t, t.TempDir(), "").Pull(ctx, ref, image.PullAlways, image.WithKeyring(keyring(t, dockercfg))); err != nil {
		t.Errorf("dockercfg Secret: %v", err)
	}
	bad := &corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "bad"}, Type: image.SecretTypeDockerConfigJSON,
		Data: map[string][]byte{image.DockerConfigJSONKey: []byte("{")}}
	if _, err := image.KeyringFromSecrets([]*corev1.Secret{bad}); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("malformed Secret: %v, want an error naming it", err)
	}
}

// TestPullNeverJoinsAnotherCredentialsDownload: while a pull with the
// right credentials is in flight, a pull of the same image with wrong ones
// makes its own requests and fails, never sharing the other's result.
func TestPullNeverJoinsAnotherCredentialsDownload(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	reg.Push(t, "private/app:1", smallImage(t, "secret"))
	reg.RequireBasicAuth("puller", "s3cret")
	ref := reg.Addr + "/private/app:1"
	s := newStore(t, t.TempDir(), "")
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	arrived := make(chan struct{}, 64)
	reg.OnRequest(func(*http.Request) {
		arrived <- struct{}{}
		<-release
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	right, wrong := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := s.Pull(ctx, ref, image.PullAlways, image.WithKeyring(keyring(t, dockerConfigSecret("right", reg.Addr, "puller", "s3cret"))))
		right <- err
	}()
	<-arrived // the right pull's first request is held
	go func() {
		_, err := s.Pull(ctx, ref, image.PullAlways, image.WithKeyring(keyring(t, dockerConfigSecret("wrong", reg.Addr, "puller", "nope"))))
		wrong <- err
	}()
	select { // the wrong pull's own first request: it did not join
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the pull with wrong credentials made no request of its own")
	}
	unblock()
	if err := <-right; err != nil {
		t.Errorf("right credentials: %v", err)
	}
	if err := <-wrong; !errors.Is(err, image.ErrPull) || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Errorf("wrong credentials: %v, want ErrPull naming UNAUTHORIZED", err)
	}
}

package image

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// dockerHub is how go-containerregistry names docker.io.
const dockerHub = "index.docker.io"

// reference is a parsed image reference.
type reference struct {
	// canonical is the normalised name with tag or digest, as Kubernetes
	// reports it: "docker.io/library/nginx:latest".
	canonical string
	// repo is the normalised repository: "docker.io/library/nginx".
	repo string
	// tag is the tag, "" for a reference by digest.
	tag string
	// remote is the reference to fetch, with the mirror substituted.
	remote name.Reference
	// registry and path are the registry and repository as written (the
	// mirror not substituted): what a Keyring matches.
	registry, path string
}

// parseReference normalises ref and chooses where it is fetched from.
func parseReference(ref, mirror string, insecure bool) (reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return reference{}, fmt.Errorf("%w: %q: %v", ErrInvalidReference, ref, err)
	}
	reg := r.Context().RegistryStr()
	repoPath := r.Context().RepositoryStr()
	display := reg
	if reg == dockerHub {
		display = "docker.io"
	}
	out := reference{repo: display + "/" + repoPath, registry: reg, path: repoPath}
	switch t := r.(type) {
	case name.Tag:
		out.tag = t.TagStr()
		out.canonical = out.repo + ":" + out.tag
	case name.Digest:
		out.canonical = out.repo + "@" + t.DigestStr()
	}

	fetchReg := reg
	if reg == dockerHub && mirror != "" {
		fetchReg = mirror
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	remoteName := fetchReg + "/" + repoPath + strings.TrimPrefix(out.canonical, out.repo)
	out.remote, err = name.ParseReference(remoteName, opts...)
	if err != nil {
		return reference{}, fmt.Errorf("%w: %q (fetched as %q): %v", ErrInvalidReference, ref, remoteName, err)
	}
	return out, nil
}

package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/podflow/podflow/services/manifest"
)

// ManifestFiles are the files -f path names, as kubectl reads them: path
// itself, or for a directory the .json, .yaml and .yml files in it
// (recursive: in its subdirectories too), in lexical order.
func ManifestFiles(path string, recursive bool) ([]string, error) {
	if path == "-" {
		return []string{path}, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("the path %q does not exist", path)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	var out []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != path && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".json", ".yaml", ".yml":
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("error reading [%s]: recognized file extensions are [.json .yaml .yml]", path)
	}
	return out, nil
}

// ReadKustomization builds the kustomization in dir (kubectl apply -k,
// with kubectl's own library, sigs.k8s.io/kustomize/api) and decodes the
// result as ReadManifest does.
func ReadKustomization(dir string) ([]manifest.Object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	b, err := m.AsYaml()
	if err != nil {
		return nil, err
	}
	objs, err := manifest.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("error validating the kustomization %q: %w", dir, err)
	}
	return objs, nil
}

// ReadSources reads what -f (files or directories; recursive: their
// subdirectories too) or -k (a kustomization directory) name.
func ReadSources(files []string, kustomization string, recursive bool) ([]manifest.Object, error) {
	switch {
	case len(files) == 0 && kustomization == "":
		return nil, errors.New("must specify one of -f and -k")
	case len(files) > 0 && kustomization != "":
		return nil, errors.New("only one of -f or -k can be specified")
	case kustomization != "":
		return ReadKustomization(kustomization)
	}
	var objs []manifest.Object
	for _, f := range files {
		paths, err := ManifestFiles(f, recursive)
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			got, err := ReadManifest(p)
			if err != nil {
				return nil, err
			}
			objs = append(objs, got...)
		}
	}
	return objs, nil
}

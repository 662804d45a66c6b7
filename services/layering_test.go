package services

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const (
	module = "github.com/podflow/podflow/services/"
	// stagesDir holds one folder per stage; every other folder of the
	// module is a library the stages share.
	stagesDir = "stages"
)

// lifecycle are the lifecycle stages, in pipeline order. Controller
// stages are added beside them in stagesDir.
var lifecycle = []string{"api", "admission", "persistence", "scheduler", "status", "endpoints"}

// imports lists the podflow services packages each non-test Go file under
// dir imports, by file path.
func imports(t *testing.T, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if rest, ok := strings.CutPrefix(p, module); ok {
				out[path] = append(out[path], rest)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stageOf is the stage an import path (relative to the module) belongs
// to, or "" for a library.
func stageOf(rel string) string {
	rest, ok := strings.CutPrefix(rel, stagesDir+"/")
	if !ok {
		return ""
	}
	s, _, _ := strings.Cut(rest, "/")
	return s
}

// TestNoStageImportsAnotherStage keeps the dependency direction of
// issue 12: pod rules live in proto/podrules, shared validation in
// services/validate, graceful pod deletion in services/stage, and no
// package of services/stages/<stage> (nor one below it) imports another
// stage. The libraries beside services/stages (stage, objects,
// namespace, ...) import no stage at all: what several stages use lives
// below them all.
func TestNoStageImportsAnotherStage(t *testing.T) {
	dirs, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		if !dir.IsDir() {
			continue
		}
		for path, imps := range imports(t, dir.Name()) {
			s := stageOf(filepath.ToSlash(path))
			for _, imp := range imps {
				top := stageOf(imp)
				switch {
				case top == "" || top == s:
				case s != "":
					t.Errorf("%s imports stage %q (%s): stages meet only on the bus and in the store", path, top, imp)
				default:
					t.Errorf("%s imports stage %q (%s): a package stages share must not depend on one of them", path, top, imp)
				}
			}
		}
	}
}

// TestStagesLiveTogether: every lifecycle stage is a folder of
// services/stages, and none is left beside the libraries.
func TestStagesLiveTogether(t *testing.T) {
	for _, s := range lifecycle {
		if fi, err := os.Stat(filepath.Join(stagesDir, s)); err != nil || !fi.IsDir() {
			t.Errorf("stage %q: no folder %s/%s: %v", s, stagesDir, s, err)
		}
		if _, err := os.Stat(s); err == nil {
			t.Errorf("stage %q has a folder beside the libraries (services/%s): it belongs in %s/", s, s, stagesDir)
		}
	}
}

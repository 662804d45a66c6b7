package services

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// stages are the lifecycle stages: each is an actor that talks to the
// others only through the bus and the store, never by importing them.
var stages = []string{"api", "admission", "persistence", "scheduler", "status", "endpoints"}

// TestNoStageImportsAnotherStage keeps the dependency direction of
// issue 12: pod rules live in proto/podrules, shared validation in
// services/validate, graceful pod deletion in services/stage, and no
// services/<stage> package (nor one below it) imports another stage. The
// shared packages beside the stages (stage, objects, namespace, ...)
// import no stage at all: what several stages use lives below them all.
func TestNoStageImportsAnotherStage(t *testing.T) {
	const prefix = "github.com/podflow/podflow/services/"
	dirs, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		if !dir.IsDir() {
			continue
		}
		s := dir.Name()
		err := filepath.WalkDir(s, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				rest, ok := strings.CutPrefix(p, prefix)
				if !ok {
					continue
				}
				top, _, _ := strings.Cut(rest, "/")
				switch {
				case top == s || !slices.Contains(stages, top):
				case slices.Contains(stages, s):
					t.Errorf("%s imports stage %q (%s): stages meet only on the bus and in the store", path, top, p)
				default:
					t.Errorf("%s imports stage %q (%s): a package stages share must not depend on one of them", path, top, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

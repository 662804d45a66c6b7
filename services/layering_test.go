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
// services/validate, and no services/<stage> package (nor one below it)
// imports another stage.
func TestNoStageImportsAnotherStage(t *testing.T) {
	const prefix = "github.com/podflow/podflow/services/"
	for _, s := range stages {
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
				if top != s && slices.Contains(stages, top) {
					t.Errorf("%s imports stage %q (%s): stages meet only on the bus and in the store", path, top, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

package scheduler_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/podflow/podflow/"

// TestPartsDoNoIO keeps the scheduler's parts as its doc.go says: the
// framework, the plugins and the cache do no I/O — they import nothing of
// the bus, the store, the network or the file system — and depend in one
// direction: the framework on none of the others, a plugin on the
// framework (and other plugins), the cache on the framework and the
// plugins. Only this package (the stage) does I/O.
func TestPartsDoNoIO(t *testing.T) {
	own := module + "services/stages/scheduler/"
	allowed := map[string][]string{
		"framework": {module + "proto/"},
		"plugins":   {module + "proto/", own + "framework", own + "plugins/"},
		"cache":     {module + "proto/", own + "framework", own + "plugins/"},
	}
	banned := []string{"net", "os", "syscall", "io/fs", "github.com/nats-io/", "github.com/hashicorp/"}
	for part, ok := range allowed {
		err := filepath.WalkDir(part, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, b := range banned {
					if p == b || strings.HasPrefix(p, b+"/") || strings.HasSuffix(b, "/") && strings.HasPrefix(p, b) {
						t.Errorf("%s imports %s: the %s does no I/O", path, p, part)
					}
				}
				if !strings.HasPrefix(p, module) {
					continue
				}
				fine := false
				for _, a := range ok {
					fine = fine || p == a || strings.HasPrefix(p, a) && strings.HasSuffix(a, "/")
				}
				if !fine {
					t.Errorf("%s imports %s: the %s may import only %v", path, p, part, ok)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

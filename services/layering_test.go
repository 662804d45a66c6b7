package services

import (
	"go/ast"
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

// podWritersWithoutPodSecurity are the functions that rewrite a stored pod
// without evaluating Pod Security, each with why it cannot add or change
// a container. Every other function that rewrites a stored pod
// (objects.Mutate with a *corev1.Pod) must call the check
// (services/podsecurity, or the front door's checkPodSecurity), as
// kube-apiserver's PodSecurity admission evaluates every pod write but
// those on its ignoredPodSubresources (status, binding, eviction, ...).
var podWritersWithoutPodSecurity = map[string]string{
	"stage/deletion.go DeletePod":                         "sets deletionTimestamp and the grace period (a DELETE, not evaluated)",
	"stages/scheduler/stage.go markNotScheduled":          "sets the PodScheduled condition (status)",
	"stages/nodelifecycle/controller.go evictPod":         "sets the DisruptionTarget condition (status), then deletes the pod (an eviction)",
	"stages/nodelifecycle/controller.go markPodsNotReady": "sets the Ready condition False (status)",
	"stages/api/eviction.go addConditionAndDeletePod":     "sets the DisruptionTarget condition (status) and deletionTimestamp (pods/eviction, ignored by PodSecurity)",
	// Metadata only: kube's PodSecurity admission skips a pod update that
	// leaves the spec as it was.
	"controller/kube.go AdoptPod":            "adds the controller's ownerReference (metadata)",
	"controller/kube.go ReleasePod":          "removes an ownerReference (metadata)",
	"stages/job/controller.go release":       "removes the Job's ownerReference and tracking finalizer (metadata)",
	"stages/statefulset/client.go UpdatePod": "sets the StatefulSet's identity labels (metadata)",
	"stages/daemonset/client.go Patch":       "sets a pod's labels, kube's dedupCurHistories relabelling (metadata)",
}

// TestPodWritesCheckPodSecurity: every path that rewrites a stored pod
// evaluates Pod Security or is listed above with its reason (issue 38:
// pods/ephemeralcontainers once skipped the check). A new pod subresource
// that writes the spec without the check fails here.
func TestPodWritesCheckPodSecurity(t *testing.T) {
	fset := token.NewFileSet()
	found := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			writes, checks := false, false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				name := calleeName(call.Fun)
				if strings.Contains(strings.ToLower(name), "podsecurity") {
					checks = true
				}
				if name == "Mutate" && mutatesPod(call) {
					writes = true
				}
				return true
			})
			if !writes {
				continue
			}
			key := filepath.ToSlash(path) + " " + fn.Name.Name
			found[key] = true
			if _, listed := podWritersWithoutPodSecurity[key]; !listed && !checks {
				t.Errorf("%s rewrites a stored pod without evaluating Pod Security (call podsecurity.CheckUpdate, or list it in podWritersWithoutPodSecurity with why it cannot change a container)", key)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key := range podWritersWithoutPodSecurity {
		if !found[key] {
			t.Errorf("podWritersWithoutPodSecurity lists %s, which writes no pod any more: remove it", key)
		}
	}
}

// calleeName is the called function's or method's name.
func calleeName(fun ast.Expr) string {
	switch f := fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	case *ast.IndexExpr: // Mutate[*corev1.Pod]
		return calleeName(f.X)
	case *ast.IndexListExpr:
		return calleeName(f.X)
	}
	return ""
}

// mutatesPod reports whether a Mutate call is over a *corev1.Pod: its type
// argument or its function's parameter.
func mutatesPod(call *ast.CallExpr) bool {
	isPod := func(e ast.Expr) bool {
		star, ok := e.(*ast.StarExpr)
		if !ok {
			return false
		}
		sel, ok := star.X.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "Pod"
	}
	if ix, ok := call.Fun.(*ast.IndexExpr); ok && isPod(ix.Index) {
		return true
	}
	for _, a := range call.Args {
		if lit, ok := a.(*ast.FuncLit); ok {
			for _, p := range lit.Type.Params.List {
				if isPod(p.Type) {
					return true
				}
			}
		}
	}
	return false
}

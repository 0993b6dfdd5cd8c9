// Package lint holds the project's own static checks, run as ordinary tests.
//
// The deterministic packages (the FSM and the engine core) must read no clock,
// use no global randomness and start no goroutines: time and randomness enter
// as arguments, and one goroutine outside them owns them. Check enforces that
// on the Go sources of a directory tree.
package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// bannedCalls are package-level functions of package time that read the
// clock or schedule on it.
var bannedCalls = map[string]map[string]bool{
	"time": {
		"Now": true, "Since": true, "Until": true, "After": true, "AfterFunc": true,
		"Tick": true, "NewTimer": true, "NewTicker": true, "Sleep": true,
	},
}

// bannedImports give randomness that would make replicas or replays differ.
var bannedImports = map[string]bool{
	"math/rand":    true,
	"math/rand/v2": true,
	"crypto/rand":  true,
}

// Finding is one violation.
type Finding struct {
	Pos     token.Position
	Message string
}

func (f Finding) String() string { return fmt.Sprintf("%s: %s", f.Pos, f.Message) }

// Check parses every non-test Go file under root (recursively) and reports
// clock reads, banned randomness imports and go statements.
func Check(root string) ([]Finding, error) {
	var out []Finding
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		out = append(out, checkFile(fset, f)...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

func checkFile(fset *token.FileSet, f *ast.File) []Finding {
	var out []Finding
	// Local names under which banned packages are imported.
	local := map[string]string{}
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			continue
		}
		if bannedImports[p] {
			out = append(out, Finding{fset.Position(imp.Pos()), "imports " + p + " (randomness must be seeded through the configuration)"})
		}
		if _, ok := bannedCalls[p]; ok {
			name := p[strings.LastIndex(p, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			local[name] = p
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			out = append(out, Finding{fset.Position(n.Pos()), "starts a goroutine"})
		case *ast.SelectorExpr:
			id, ok := n.X.(*ast.Ident)
			if !ok {
				return true
			}
			if p, ok := local[id.Name]; ok && bannedCalls[p][n.Sel.Name] {
				out = append(out, Finding{fset.Position(n.Pos()), "uses " + p + "." + n.Sel.Name + " (time must be passed in)"})
			}
		}
		return true
	})
	return out
}

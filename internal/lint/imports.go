package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// A Layer is the import rule of the packages at Pkg (a path relative to the
// module; "x/..." means x and everything under it): which packages of the
// module they may import. Imports from outside the module are not checked.
type Layer struct {
	Pkg string
	// May lists the module's packages the layer may import (relative paths,
	// "x/..." for x and everything under it). The layer's own packages are
	// always allowed.
	May []string
	// Names restricts what the layer may use of an allowed package: for an
	// import path (relative), the only exported names it may refer to.
	Names map[string][]string
}

// CheckImports parses every non-test Go file of the module rooted at root
// (import path module), whatever its build tags, and reports each import
// and each use of a restricted package's name that its layer does not
// allow. A package matches the layer with the longest Pkg that covers it;
// packages no layer covers are not checked.
func CheckImports(root, module string, layers []Layer) ([]Finding, error) {
	var out []Finding
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || d.Name() == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		layer, ok := layerOf(pkg, layers)
		if !ok {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly|parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", p, err)
		}
		if len(layer.Names) > 0 {
			if f, err = parser.ParseFile(fset, p, nil, parser.SkipObjectResolution); err != nil {
				return fmt.Errorf("parsing %s: %w", p, err)
			}
		}
		out = append(out, checkFileImports(fset, f, module, pkg, layer)...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// covers reports whether pattern ("x", "x/..." or "..." for every package)
// covers the package pkg.
func covers(pattern, pkg string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func layerOf(pkg string, layers []Layer) (Layer, bool) {
	var best Layer
	found := false
	for _, l := range layers {
		if covers(l.Pkg, pkg) && (!found || len(l.Pkg) > len(best.Pkg)) {
			best, found = l, true
		}
	}
	return best, found
}

func checkFileImports(fset *token.FileSet, f *ast.File, module, pkg string, layer Layer) []Finding {
	var out []Finding
	restricted := map[string][]string{} // local name -> allowed names
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil || (p != module && !strings.HasPrefix(p, module+"/")) {
			continue
		}
		dep := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if !allowed(dep, pkg, layer) {
			out = append(out, Finding{fset.Position(imp.Pos()), fmt.Sprintf("%s imports %s (the layer %s may not)", pkg, dep, layer.Pkg)})
			continue
		}
		if names, ok := layer.Names[dep]; ok {
			local := path.Base(dep)
			if imp.Name != nil {
				local = imp.Name.Name
			}
			restricted[local] = names
		}
	}
	if len(restricted) == 0 {
		return out
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		names, ok := restricted[id.Name]
		if !ok {
			return true
		}
		for _, name := range names {
			if name == sel.Sel.Name || strings.HasSuffix(name, "*") && strings.HasPrefix(sel.Sel.Name, strings.TrimSuffix(name, "*")) {
				return true
			}
		}
		out = append(out, Finding{fset.Position(sel.Pos()), fmt.Sprintf("%s uses %s.%s (the layer %s may use only %s of it)",
			pkg, id.Name, sel.Sel.Name, layer.Pkg, strings.Join(names, ", "))})
		return true
	})
	return out
}

func allowed(dep, pkg string, layer Layer) bool {
	if covers(layer.Pkg, dep) || dep == pkg {
		return true
	}
	for _, m := range layer.May {
		if covers(m, dep) {
			return true
		}
	}
	return false
}

package ui

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/cronoq/cronoq/client"
)

// The geometry of a drawn workflow, in SVG user units.
const (
	boxW    = 170
	boxH    = 46
	gapX    = 60
	gapY    = 18
	padding = 10
)

// graph is a workflow's DAG laid out in layers: a task's layer is the
// length of the longest chain of its dependencies inside the workflow.
type graph struct {
	Width, Height int
	Nodes         []graphNode
	Edges         []graphEdge
}

type graphNode struct {
	ID, Step, Kind, Status string
	X, Y                   int
	Layer                  int
}

type graphEdge struct {
	// From and To are the ids of the dependency and of its dependent.
	From, To string
	// Path is the SVG path of the edge: from the right side of the
	// dependency's box to the left side of the dependent's.
	Path string
}

// layout lays the members of a workflow out, deterministically: layers
// from left to right, each ordered by the mean position of the tasks it
// depends on, then by step name and id. A dependency outside the workflow
// is not drawn; a dependency cycle (which the cluster refuses) would put
// its members in layer 0 rather than loop.
func layout(tasks []*client.Task) graph {
	byID := make(map[string]*client.Task, len(tasks))
	for _, t := range tasks {
		byID[t.ID] = t
	}
	deps := func(t *client.Task) []string {
		var out []string
		for _, d := range t.DependsOn {
			if _, ok := byID[d]; ok && d != t.ID {
				out = append(out, d)
			}
		}
		return out
	}
	layer := map[string]int{}
	const visiting = -1
	var depth func(id string, budget int) int
	depth = func(id string, budget int) int {
		if l, ok := layer[id]; ok {
			if l == visiting {
				return 0 // a cycle
			}
			return l
		}
		if budget == 0 {
			return 0
		}
		layer[id] = visiting
		l := 0
		for _, d := range deps(byID[id]) {
			l = max(l, depth(d, budget-1)+1)
		}
		layer[id] = l
		return l
	}
	layers := [][]*client.Task{}
	for _, t := range tasks {
		l := depth(t.ID, len(tasks)+1)
		for len(layers) <= l {
			layers = append(layers, nil)
		}
		layers[l] = append(layers[l], t)
	}
	pos := map[string]int{} // row of each placed task
	var g graph
	rows := 0
	for li, members := range layers {
		key := func(t *client.Task) float64 {
			ds := deps(t)
			if len(ds) == 0 {
				return 0
			}
			sum := 0
			for _, d := range ds {
				sum += pos[d]
			}
			return float64(sum) / float64(len(ds))
		}
		slices.SortStableFunc(members, func(a, b *client.Task) int {
			return cmp.Or(cmp.Compare(key(a), key(b)), cmp.Compare(a.Step, b.Step), cmp.Compare(a.ID, b.ID))
		})
		for row, t := range members {
			pos[t.ID] = row
			g.Nodes = append(g.Nodes, graphNode{
				ID: t.ID, Step: t.Step, Kind: t.Kind, Status: t.Status, Layer: li,
				X: padding + li*(boxW+gapX), Y: padding + row*(boxH+gapY),
			})
		}
		rows = max(rows, len(members))
	}
	at := make(map[string]graphNode, len(g.Nodes))
	for _, n := range g.Nodes {
		at[n.ID] = n
	}
	for _, n := range g.Nodes {
		for _, d := range deps(byID[n.ID]) {
			from := at[d]
			x1, y1 := from.X+boxW, from.Y+boxH/2
			x2, y2 := n.X, n.Y+boxH/2
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, graphEdge{From: d, To: n.ID,
				Path: pathf(x1, y1, mid, y1, mid, y2, x2, y2)})
		}
	}
	g.Width = 2*padding + max(1, len(layers))*(boxW+gapX) - gapX
	g.Height = 2*padding + max(1, rows)*(boxH+gapY) - gapY
	return g
}

func pathf(x1, y1, cx1, cy1, cx2, cy2, x2, y2 int) string {
	return "M" + itoa(x1) + " " + itoa(y1) + " C" + itoa(cx1) + " " + itoa(cy1) + " " +
		itoa(cx2) + " " + itoa(cy2) + " " + itoa(x2) + " " + itoa(y2)
}

func itoa(n int) string { return strconv.Itoa(n) }
